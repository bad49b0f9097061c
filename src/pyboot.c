// SPDX-License-Identifier: MIT
// The Python bootstrap: with no change to the program, a preloaded Python
// interpreter imports aoshim's sitecustomize at start-up (python/boot next to
// this library), which waits for torch and marks the model's blocks.
//
// Only a Python interpreter is touched: the process must define Py_BytesMain
// (the interpreter's entry point, in the executable or in libpython). The
// folder goes first on PYTHONPATH, which the interpreter reads after every
// constructor has run; the sitecustomize takes it off again at once, so the
// program and its children see the user's own environment. `python -E` and
// `-I` ignore PYTHONPATH: there the program imports aoshim.torch itself.
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "pyboot.h"

// Where the bootstrap lives relative to libaoshim.so: the build tree keeps it
// in src/python beside the library, an install in <libdir>/aoshim/python.
static const char *const layouts[] = {"python/boot", "aoshim/python/boot"};

static bool find_boot(char *out, size_t size)
{
    Dl_info self;
    if (!dladdr((void *)find_boot, &self) || !self.dli_fname) return false;
    const char *slash = strrchr(self.dli_fname, '/');
    int dirlen = slash ? (int)(slash - self.dli_fname) : 1;
    const char *dir = slash ? self.dli_fname : ".";
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        char probe[PATH_MAX];
        int n = snprintf(out, size, "%.*s/%s", dirlen, dir, layouts[i]);
        if (n < 0 || (size_t)n >= size) continue;
        if (snprintf(probe, sizeof probe, "%s/sitecustomize.py", out) >= (int)sizeof probe)
            continue;
        if (access(probe, R_OK) == 0) return true;
    }
    return false;
}

void ao_pyboot_init(void)
{
    if (ao_config.torch && strcmp(ao_config.torch, "0") == 0) return;
    if (!dlsym(RTLD_DEFAULT, "Py_BytesMain")) return; // not a Python interpreter
    char boot[PATH_MAX];
    if (!find_boot(boot, sizeof boot)) {
        ao_log(AO_LOG_WARN, "Python bootstrap not found beside libaoshim.so (python/boot or "
                            "aoshim/python/boot): PyTorch blocks are not marked automatically");
        return;
    }
    const char *old = getenv("PYTHONPATH");
    size_t n = strlen(boot);
    if (old && strncmp(old, boot, n) == 0 && (old[n] == ':' || !old[n])) return; // already first
    char path[3 * PATH_MAX];
    if (old && *old) {
        if (snprintf(path, sizeof path, "%s:%s", boot, old) >= (int)sizeof path) return;
    } else {
        snprintf(path, sizeof path, "%s", boot);
    }
    setenv("PYTHONPATH", path, 1);
    if (ao_config.verbose) ao_log(AO_LOG_INFO, "Python bootstrap: %s", boot);
}
