/* main.c — the cwen binary: dispatches to a subcommand, nothing else. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

struct subcommand {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct subcommand commands[] = {
    {"run", cw_cmd_run, "complete a prompt (raw text), streamed"},
    {"chat", cw_cmd_chat, "chat through the model's template: one question, or turns from stdin"},
    {"bench", cw_cmd_bench, "time prefill and decode on a backend (llama-bench-like table)"},
    {"debug-dump", cw_cmd_debug_dump, "per-op activations of the CPU forward, vs a llama.cpp dump"},
    {"inspect", cw_cmd_inspect, "print a GGUF's metadata, tensors and memory budget"},
    {"mkmodel", cw_cmd_mkmodel, "write a synthetic Qwen3.6 GGUF (random weights, real shapes)"},
    {"serve", cw_cmd_serve, "serve a model over HTTP (OpenAI, Anthropic and native APIs)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: cwen <command> [options]   (cwen <command> --help for each)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "cwen: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
