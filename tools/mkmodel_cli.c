/* STUB */
#include "cli/cli.h"
int cw_cmd_mkmodel(int argc, char **argv) { (void)argc; (void)argv; return 1; }
