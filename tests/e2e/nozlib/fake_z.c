// SPDX-License-Identifier: MIT
// A libz.so.1 with none of zlib's functions: put first on LD_LIBRARY_PATH,
// it is what aoshim's dlopen("libz.so.1") finds, so the step trace is
// written without compression (test_record.c).
int aoshim_test_not_zlib(void)
{
    return 0;
}
