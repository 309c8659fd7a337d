/* CRC32C (Castagnoli, as ``google-crc32c`` computes it) for the log's C twins: the SSE4.2
 * ``crc32`` instruction when the CPU has it (checked once, at import, by ``crc32c_init``), else
 * a slicing-by-8 table. One copy for the reader (``_creader.c``) and the framer
 * (``_cpayload.c``), each of which includes it: every function is ``static``, so each module
 * keeps its own table, filled by its own init. Each also exposes both ways of the checksum to
 * the tests as ``crc32c(data, initial=0, portable=False)`` (``crc32c_py``, listed in its
 * method table by ``CRC32C_METHOD``), so include ``Python.h`` first. */

#ifndef MINIDB_CRC32C_H
#define MINIDB_CRC32C_H

#ifndef Py_PYTHON_H
#error "include Python.h before _crc32c.h (its crc32c test wrapper is a Python function)"
#endif

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_SSE42_PATH 1
#include <nmmintrin.h>
#else
#define HAVE_SSE42_PATH 0
#endif

static uint32_t crc_table[8][256];
static int hardware_crc;

static void
init_crc_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc_table[t][n] = (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xff];
}

/* The raw register update (no inversion), eight bytes a step. */
static uint32_t
crc_portable(uint32_t c, const unsigned char *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
            crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if HAVE_SSE42_PATH
__attribute__((target("sse4.2"))) static uint32_t
crc_sse42(uint32_t c, const unsigned char *p, size_t n)
{
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c64 = _mm_crc32_u64(c64, word);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

/* CRC32C of ``p[0:n]`` continuing from ``crc`` (google_crc32c.extend). */
static uint32_t
crc32c_extend(uint32_t crc, const unsigned char *p, size_t n)
{
#if HAVE_SSE42_PATH
    if (hardware_crc)
        return ~crc_sse42(~crc, p, n);
#endif
    return ~crc_portable(~crc, p, n);
}

/* Fill the table and learn whether the CPU has SSE4.2: once, in the module's init. */
static void
crc32c_init(void)
{
    init_crc_table();
#if HAVE_SSE42_PATH
    __builtin_cpu_init();
    hardware_crc = __builtin_cpu_supports("sse4.2");
#endif
}

/* ``crc32c(data, initial=0, portable=False)``: for the tests, both ways of the checksum (the
 * CPU's instruction where ``crc32c_init`` found it, and the table). ``initial`` is taken
 * modulo 2**32, as the ``I`` format does. */
static PyObject *
crc32c_py(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"data", "initial", "portable", NULL};
    Py_buffer data;
    unsigned int initial = 0;
    int portable = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|Ip", keywords, &data, &initial,
                                     &portable))
        return NULL;
    uint32_t crc;
    if (portable)
        crc = ~crc_portable(~(uint32_t)initial, data.buf, (size_t)data.len);
    else
        crc = crc32c_extend((uint32_t)initial, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

/* ``crc32c_py``'s entry in a module's ``PyMethodDef`` table. */
#define CRC32C_METHOD                                                                          \
    {"crc32c", (PyCFunction)(void (*)(void))crc32c_py, METH_VARARGS | METH_KEYWORDS,           \
     "crc32c(data, initial=0, portable=False) -> CRC32C of data continuing from initial "     \
     "(portable: the table, not the CPU's instruction)."}

#endif /* MINIDB_CRC32C_H */
