/* STUB */
#include "cli/cli.h"
int cw_cmd_inspect(int argc, char **argv) { (void)argc; (void)argv; return 1; }
