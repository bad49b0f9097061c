// SPDX-License-Identifier: MIT
// The Python bootstrap (pyboot.c).
#ifndef AO_PYBOOT_H
#define AO_PYBOOT_H

// In a Python interpreter, put aoshim's bootstrap first on PYTHONPATH.
void ao_pyboot_init(void);

#endif // AO_PYBOOT_H
