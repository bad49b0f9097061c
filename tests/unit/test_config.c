// SPDX-License-Identifier: MIT
// AOSHIM_* parsing: each parser's accepted forms, and the one-line errors.
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

Test(config, sizes)
{
    uint64_t v;
    cr_assert_eq(ao_parse_size("4096", &v), 0);
    cr_assert_eq(v, 4096);
    cr_assert_eq(ao_parse_size("512K", &v), 0);
    cr_assert_eq(v, 512u << 10);
    cr_assert_eq(ao_parse_size("1MiB", &v), 0);
    cr_assert_eq(v, 1u << 20);
    cr_assert_eq(ao_parse_size("2g", &v), 0);
    cr_assert_eq(v, 2ull << 30);
    cr_assert_eq(ao_parse_size("3TB", &v), 0);
    cr_assert_eq(v, 3ull << 40);
    const char *bad[] = {"", "-1", "+5", " 5", "5 ", "1.5G", "G", "1X", "1GiBs", "99999999999T",
                         "18446744073709551616"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_eq(ao_parse_size(bad[i], &v), -1, "accepted '%s'", bad[i]);
}

Test(config, bools)
{
    bool b;
    const char *t[] = {"1", "true", "YES", "on"}, *f[] = {"0", "False", "no", "OFF"};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(ao_parse_bool(t[i], &b), 0);
        cr_assert(b);
        cr_assert_eq(ao_parse_bool(f[i], &b), 0);
        cr_assert(!b);
    }
    cr_assert_eq(ao_parse_bool("2", &b), -1);
    cr_assert_eq(ao_parse_bool("", &b), -1);
    cr_assert_eq(ao_parse_bool("y", &b), -1);
}

Test(config, layers)
{
    ao_layerset_t s;
    cr_assert_eq(ao_parse_layers("12", &s), 0);
    cr_assert(ao_layerset_has(&s, 11, 0) && !ao_layerset_has(&s, 12, 0));
    cr_assert_eq(ao_parse_layers("0-3,7,9-10", &s), 0);
    unsigned want[] = {0, 1, 2, 3, 7, 9, 10};
    unsigned n = 0;
    for (unsigned l = 0; l < 16; l++)
        if (ao_layerset_has(&s, l, 16)) cr_assert_eq(l, want[n++]);
    cr_assert_eq(n, 7);
    cr_assert_eq(ao_parse_layers("50%", &s), 0);
    cr_assert(!ao_layerset_has(&s, 0, 0), "percentage needs the layer count");
    cr_assert(ao_layerset_has(&s, 3, 8) && !ao_layerset_has(&s, 4, 8));
    cr_assert_eq(ao_parse_layers("all", &s), 0);
    cr_assert(ao_layerset_has(&s, 100, 0));
    cr_assert_eq(ao_parse_layers("none", &s), 0);
    cr_assert(!ao_layerset_has(&s, 0, 8));
    const char *bad[] = {"", "-1", "3-1", "1,,2", "1,", ",1", "1-", "101%", "%", "x", "4097",
                         "0-4096", "1;2", "50 %"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_eq(ao_parse_layers(bad[i], &s), -1, "accepted '%s'", bad[i]);
}

// AOSHIM_TORCH: the Python side reads the variable itself; the library
// refuses what it could not mean before the program runs, and normalises
// what it accepts to "auto", "0" or the path.
Test(config, torch)
{
    const char *v = NULL;
    const struct {
        const char *in, *want;
    } good[] = {
        {"auto", "auto"},
        {"AUTO", "auto"},
        {"0", "0"},
        {"false", "0"},
        {"No", "0"},
        {"OFF", "0"},
        {"model.layers", NULL},
        {"transformer.h", NULL},
        {"blocks", NULL},
        {"stages.1.blocks", NULL},
        {"_orig_mod.model.layers", NULL},
        {"m.layers.10", NULL},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        cr_expect_eq(ao_parse_torch(good[i].in, &v), 0, "refused '%s'", good[i].in);
        cr_expect_str_eq(v, good[i].want ? good[i].want : good[i].in, "'%s'", good[i].in);
    }
    const char *bad[] = {"",     "1",         "true",         "on",           "yes",
                         ".",    "model.",    ".model",       "a..b",         "0.blocks",
                         "1abc", "model.1x",  "model-layers", "model layers", "model.layers ",
                         "m/l",  "model.x-1", "4.0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect_eq(ao_parse_torch(bad[i], &v), -1, "accepted '%s'", bad[i]);
    char longpath[300];
    memset(longpath, 'a', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    cr_expect_eq(ao_parse_torch(longpath, &v), -1, "accepted a 299-character path");
}

Test(config, load_torch_and_control_log)
{
    ao_config_t c;
    char err[768];
    char *env0[] = {"PATH=/bin", NULL};
    cr_assert_eq(ao_config_load(&c, env0, err, sizeof err), 0);
    cr_assert_str_eq(c.torch, "auto");
    cr_assert_null(c.control_log, "no control log by default");

    char *env1[] = {"AOSHIM_TORCH=Off", "AOSHIM_CONTROL_LOG=/tmp/ctl.%p.log", NULL};
    cr_assert_eq(ao_config_load(&c, env1, err, sizeof err), 0);
    cr_assert_str_eq(c.torch, "0");
    cr_assert_str_eq(c.control_log, "/tmp/ctl.%p.log");

    char *env2[] = {"AOSHIM_TORCH=model.layers", NULL};
    cr_assert_eq(ao_config_load(&c, env2, err, sizeof err), 0);
    cr_assert_str_eq(c.torch, "model.layers");

    char *env3[] = {"AOSHIM_TORCH=on", NULL};
    cr_assert_eq(ao_config_load(&c, env3, err, sizeof err), -1);
    cr_assert_str_eq(err, "aoshim: error: AOSHIM_TORCH='on': 'auto', '0' (off; also "
                          "false/no/off) or a dotted attribute path of identifiers and integers "
                          "(model.layers, stages.1.blocks)");

    char *env4[] = {"AOSHIM_CONTROL_LOG=", NULL};
    cr_assert_eq(ao_config_load(&c, env4, err, sizeof err), -1);
    cr_assert_str_eq(err, "aoshim: error: AOSHIM_CONTROL_LOG='': a file name (%p: pid, %r: rank, "
                          "%h: host)");
}

// The help text is what the verbose listing and the README show: it must say
// what each AOSHIM_TORCH value does.
Test(config, torch_help_documents_values)
{
    const char *name, *def, *help;
    bool found = false;
    for (size_t i = 0; ao_config_describe(i, &name, &def, &help); i++)
        if (strcmp(name, "TORCH") == 0) {
            found = true;
            cr_expect_str_eq(def, "auto");
            cr_expect_str_eq(help, "auto: find the model's repeated block list at the first "
                                   "forward; 0: off; a dotted path (model.layers): that module "
                                   "list");
        }
    cr_expect(found, "no AOSHIM_TORCH in the options table");
}

Test(config, load_defaults_and_errors)
{
    ao_config_t c;
    char err[768];
    char *env0[] = {"PATH=/bin", NULL};
    cr_assert_eq(ao_config_load(&c, env0, err, sizeof err), 0);
    cr_assert(c.enable);
    cr_assert_eq(c.prefetch, 1);
    cr_assert_eq(c.min_bytes, 1u << 20);
    cr_assert_eq(c.offload_layers.kind, AO_LAYERS_ALL);

    char *env1[] = {"AOSHIM_PREFETCH=3", "AOSHIM_MIN_BYTES=64K", NULL};
    cr_assert_eq(ao_config_load(&c, env1, err, sizeof err), 0);
    cr_assert_eq(c.prefetch, 3);
    cr_assert_eq(c.min_bytes, 64u << 10);

    char *env2[] = {"AOSHIM_PREFETCH=lots", NULL};
    cr_assert_eq(ao_config_load(&c, env2, err, sizeof err), -1);
    cr_assert_str_eq(err, "aoshim: error: AOSHIM_PREFETCH='lots': an integer from 0 to 64");

    char *env3[] = {"AOSHIM_OFFLOAD_LAYER=3", "AOSHIM_PREFETCH=2", NULL};
    cr_redirect_stderr();
    cr_assert_eq(ao_config_load(&c, env3, err, sizeof err), 0, "an unknown name is not fatal");
    cr_assert_eq(c.prefetch, 2);
    cr_assert_eq(c.offload_layers.kind, AO_LAYERS_ALL, "the unknown name changed nothing");
    fflush(stderr);
    cr_assert_stderr_eq_str("aoshim: warning: unknown variable AOSHIM_OFFLOAD_LAYER ignored; did "
                            "you mean AOSHIM_OFFLOAD_LAYERS?\n");
}

// The README's option table is written by hand: every option must be there,
// with its default, so the documentation cannot drift from the parser.
Test(config, readme_documents_every_option)
{
    const char *path = getenv("AO_TEST_README");
    cr_assert(path, "AO_TEST_README not set by the test harness");
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot open %s", path);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    const char *name, *def, *help;
    for (size_t i = 0; ao_config_describe(i, &name, &def, &help); i++) {
        char row[128];
        snprintf(row, sizeof row, "| `AOSHIM_%s` | `%s` |", name, def);
        cr_expect(strstr(text, row) != NULL, "README has no row starting \"%s\"", row);
    }
}
