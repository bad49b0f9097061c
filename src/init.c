// SPDX-License-Identifier: MIT
// Load-time setup of libaoshim.so.
//
// Every process under LD_PRELOAD loads the shim (launchers, compilers,
// data-loader workers), so the constructor only reads the environment: CUDA
// itself is touched lazily, at the first intercepted call. A bad AOSHIM_*
// value stops the program here, before main, with exit status 2: that is the
// one place aoshim may end a program, because nothing has run yet.
#define AOSHIM_BUILDING_LIBRARY 1
#include "aoshim.h"

#include <stdlib.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

#define AO_STR2(x) #x
#define AO_STR(x) AO_STR2(x)
#define AO_VERSION_STRING                                                                          \
    AO_STR(AOSHIM_VERSION_MAJOR) "." AO_STR(AOSHIM_VERSION_MINOR) "." AO_STR(AOSHIM_VERSION_PATCH)

__attribute__((constructor)) static void ao_init(void)
{
    char err[768];
    if (ao_config_load(&ao_config, NULL, err, sizeof err) < 0) {
        ao_log(AO_LOG_ERROR, "%s", err + sizeof "aoshim: error: " - 1);
        _exit(2);
    }
    if (ao_config.verbose) {
        ao_log(AO_LOG_INFO, "version %s, pid %d", AO_VERSION_STRING, (int)getpid());
        ao_config_print(2);
    }
}

AOSHIM_API const char *aoshim_version(void)
{
    return AO_VERSION_STRING;
}
