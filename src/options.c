// SPDX-License-Identifier: MIT
// The option table for tools: aoshim-run's --help reads it from the library it
// preloads, so the launcher lists exactly the options that library parses,
// with no copy of the table to drift.
#define AOSHIM_BUILDING_LIBRARY 1
#include "aoshim.h"

#include "config.h"

// Built at compile time from AO_OPTIONS, the table the parser is generated
// from (config.c): nothing to format or allocate, safe from any thread.
static const char *const option_info[] = {
#define X(NAME, field, type, def, accepted, help) "AOSHIM_" #NAME "\t" def "\t" accepted "\t" help,
    AO_OPTIONS(X)
#undef X
};

AOSHIM_API const char *aoshim_option_info(int i)
{
    if (i < 0 || (size_t)i >= sizeof option_info / sizeof *option_info) return NULL;
    return option_info[i];
}
