/* cli.h — the subcommands of the cwen binary; main.c dispatches to them.
 * Each takes argc/argv after the subcommand name and returns the exit code. */
#ifndef CW_CLI_H
#define CW_CLI_H

int cw_cmd_bench(int argc, char **argv); /* bench/bench.c */
int cw_cmd_debug_dump(int argc, char **argv); /* tools/debug_dump.c */
int cw_cmd_inspect(int argc, char **argv);
int cw_cmd_mkmodel(int argc, char **argv);
int cw_cmd_serve(int argc, char **argv);
int cw_cmd_run(int argc, char **argv);
int cw_cmd_chat(int argc, char **argv);

#endif
