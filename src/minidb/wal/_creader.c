/* minidb.wal._creader: the log reader's plainly valid records in C (optional accelerator).
 *
 * The C twin of the common case of ``RecordReader`` (``_reader.py``) and of ``decode_ops``
 * (``_payload.py``); the format is ``docs/wal-format.md``, version 2. Two walks over a
 * buffer (``bytes``, an ``mmap``: anything with the buffer protocol), from offset ``pos``,
 * numbering records from ``number``:
 *
 * ``scan_run(buf, pos, number, limit) -> (pos, count)`` moves past up to ``limit`` records
 * that are *plainly valid DATA records*: 13 header bytes present, type DATA, a length of at
 * most ``MAX_PAYLOAD_BYTES`` whose payload lies inside the buffer, the header checksum and the
 * record checksum (over the number, the type and the payload) right. It returns where it
 * stopped and how many it passed. The GIL is released while it runs.
 *
 * ``decode_run(buf, pos, number, limit, spec) -> (entries, pos)`` walks the same records and
 * decodes each payload into its operations; ``spec`` is the tuple ``(entry, put, remove,
 * expire, flush, fallback, fallback_error)``. Each record becomes ``entry(number, offset,
 * ops)`` with ``ops`` a list of ``put(bucket, key, value, expire_at_ms | None)``,
 * ``remove(bucket, key)``, ``expire(bucket, key, expire_at_ms | None)`` and ``flush(bucket |
 * None)`` (the named tuples of ``_ops.py``, built as ``tuple.__new__`` builds them). A payload
 * this file does not decode (an operation tag it does not know, such as one added in Python
 * later, or any malformed field) is handed to ``fallback(payload)`` (``decode_ops``): its ops
 * are taken as they come, and if it raises ``fallback_error`` (``PayloadError``) the walk
 * stops *before* that record.
 *
 * Both stop at the first record that is anything else (an END record, a record cut short,
 * a checksum that fails, an unknown type, a payload that does not decode) and leave it to the
 * Python reader, which is the reference: C never decides an error and never judges torn versus
 * damaged, so every message (``minidb wal check`` included) is the Python code's. Property
 * tests in ``tests/wal/test_creader.py`` hold the two to each other.
 *
 * CRC32C (Castagnoli, as ``google-crc32c`` computes it): the SSE4.2 ``crc32`` instruction when
 * the CPU has it (checked at run time), else a slicing-by-8 table (``_crc32c.h``, whose
 * ``crc32c(data, initial=0, portable=False)`` exposes both to the tests).
 *
 * Why C: replay at start and ``minidb restore`` spent about 3 us a record in the Python reader
 * and decoder (framing, two checksum calls, struct unpacks, the named tuples); here a record
 * costs its checksums and its objects.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_crc32c.h"

#define RECORD_HEADER 13 /* length u32, type u8, header_crc u32, crc u32 */
#define HEADER_CRC_SPAN 5 /* what header_crc covers: length and type */
#define TYPE_DATA 1
#define MAX_PAYLOAD ((1u << 30) - 1)

#define TAG_PUT 1
#define TAG_REMOVE 2
#define TAG_EXPIRE 3
#define TAG_FLUSH 4
#define TAG_FLUSH_ALL 5
#define PUT_HEAD 21    /* tag u8, expire_at_ms i64, bucket_len u32, key_len u32, value_len u32 */
#define REMOVE_HEAD 9  /* tag u8, bucket_len u32, key_len u32 */
#define EXPIRE_HEAD 17 /* tag u8, expire_at_ms i64, bucket_len u32, key_len u32 */
#define FLUSH_HEAD 5   /* tag u8, bucket_len u32 */


/* -- reading ------------------------------------------------------------------------------ */

static uint32_t
get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int64_t
get_i64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return (int64_t)v;
}

/* The payload length of the plainly valid DATA record at ``pos``, or -1 if it is not one. */
static Py_ssize_t
plain_record(const unsigned char *buf, Py_ssize_t size, Py_ssize_t pos, uint64_t number)
{
    if (size - pos < RECORD_HEADER)
        return -1;
    const unsigned char *h = buf + pos;
    uint32_t length = get_u32(h);
    if (h[4] != TYPE_DATA || length > MAX_PAYLOAD)
        return -1;
    if (crc32c_extend(0, h, HEADER_CRC_SPAN) != get_u32(h + 5))
        return -1;
    if ((Py_ssize_t)length > size - pos - RECORD_HEADER)
        return -1;
    unsigned char prefix[9]; /* number u64 LE, type u8: what the record checksum starts with */
    for (int i = 0; i < 8; i++)
        prefix[i] = (unsigned char)(number >> (8 * i));
    prefix[8] = TYPE_DATA;
    uint32_t crc = crc32c_extend(crc32c_extend(0, prefix, 9), h + RECORD_HEADER, length);
    if (crc != get_u32(h + 9))
        return -1;
    return (Py_ssize_t)length;
}

/* The common arguments: the buffer, then pos, number and limit in range. */
static int
parse_walk(PyObject *const *args, Py_buffer *view, Py_ssize_t *pos, uint64_t *number,
           Py_ssize_t *limit)
{
    *pos = PyLong_AsSsize_t(args[1]);
    if (*pos == -1 && PyErr_Occurred())
        return -1;
    *number = PyLong_AsUnsignedLongLong(args[2]);
    if (*number == (uint64_t)-1 && PyErr_Occurred())
        return -1;
    *limit = PyLong_AsSsize_t(args[3]);
    if (*limit == -1 && PyErr_Occurred())
        return -1;
    if (PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0)
        return -1;
    if (*pos < 0 || *pos > view->len || *limit < 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "pos must lie in the buffer, limit be at least 0");
        return -1;
    }
    return 0;
}

static PyObject *
scan_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "scan_run(buf, pos, number, limit)");
        return NULL;
    }
    Py_buffer view;
    Py_ssize_t pos, limit, count = 0;
    uint64_t number;
    if (parse_walk(args, &view, &pos, &number, &limit) < 0)
        return NULL;
    const unsigned char *buf = view.buf;
    Py_ssize_t size = view.len;
    Py_BEGIN_ALLOW_THREADS
    while (count < limit) {
        Py_ssize_t length = plain_record(buf, size, pos, number + (uint64_t)count);
        if (length < 0)
            break;
        pos += RECORD_HEADER + length;
        count++;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("(nn)", pos, count);
}

/* -- decoding ----------------------------------------------------------------------------- */

typedef struct {
    PyTypeObject *entry, *put, *remove, *expire, *flush;
    PyObject *fallback, *fallback_error;
    PyObject *bucket; /* the last bucket made: records of one bucket share the object */
} Decoder;

/* ``type(*items)`` for a named tuple ``type``, as tuple.__new__ builds it; steals ``items``. */
static PyObject *
new_tuple(PyTypeObject *type, Py_ssize_t n, PyObject **items)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (items[i] == NULL) {
            for (Py_ssize_t j = 0; j < n; j++)
                Py_XDECREF(items[j]);
            return NULL;
        }
    }
    PyObject *t = type->tp_alloc(type, n);
    if (t == NULL) {
        for (Py_ssize_t j = 0; j < n; j++)
            Py_DECREF(items[j]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(t, i, items[i]);
    return t;
}

static PyObject *
new_bucket(Decoder *d, const unsigned char *p, uint32_t n)
{
    PyObject *last = d->bucket;
    if (last != NULL && PyBytes_GET_SIZE(last) == (Py_ssize_t)n &&
        memcmp(PyBytes_AS_STRING(last), p, n) == 0) {
        Py_INCREF(last);
        return last;
    }
    PyObject *made = PyBytes_FromStringAndSize((const char *)p, n);
    if (made != NULL) {
        Py_XSETREF(d->bucket, made);
        Py_INCREF(made);
    }
    return made;
}

static PyObject *
new_bytes(const unsigned char *p, uint32_t n)
{
    return PyBytes_FromStringAndSize((const char *)p, n);
}

static PyObject *
expiry(int64_t ms)
{
    if (ms == INT64_MIN) /* NO_EXPIRY */
        Py_RETURN_NONE;
    return PyLong_FromLongLong(ms);
}

/* Whether ``need`` more bytes are there at ``at`` (64-bit sums: lengths are u32). */
#define FITS(at, need) ((uint64_t)(at) + (uint64_t)(need) <= (uint64_t)size)

/* The ops of one version-2 payload into ``*out``: 1, or 0 when this file does not decode it
 * (the caller asks the fallback), or -1 with an exception. */
static int
decode_payload(Decoder *d, const unsigned char *p, Py_ssize_t size, PyObject **out)
{
    if (size == 0)
        return 0;
    PyObject *ops = PyList_New(0);
    if (ops == NULL)
        return -1;
    Py_ssize_t pos = 0;
    while (pos < size) {
        const unsigned char *o = p + pos;
        PyObject *op;
        switch (o[0]) {
        case TAG_PUT: {
            if (!FITS(pos, PUT_HEAD))
                goto handback;
            uint32_t blen = get_u32(o + 9), klen = get_u32(o + 13), vlen = get_u32(o + 17);
            if (!FITS(pos, (uint64_t)PUT_HEAD + blen + klen + vlen))
                goto handback;
            const unsigned char *b = o + PUT_HEAD;
            PyObject *items[4] = {new_bucket(d, b, blen), new_bytes(b + blen, klen),
                                  new_bytes(b + blen + klen, vlen), expiry(get_i64(o + 1))};
            op = new_tuple(d->put, 4, items);
            pos += PUT_HEAD + (Py_ssize_t)blen + klen + vlen;
            break;
        }
        case TAG_REMOVE: {
            if (!FITS(pos, REMOVE_HEAD))
                goto handback;
            uint32_t blen = get_u32(o + 1), klen = get_u32(o + 5);
            if (!FITS(pos, (uint64_t)REMOVE_HEAD + blen + klen))
                goto handback;
            const unsigned char *b = o + REMOVE_HEAD;
            PyObject *items[2] = {new_bucket(d, b, blen), new_bytes(b + blen, klen)};
            op = new_tuple(d->remove, 2, items);
            pos += REMOVE_HEAD + (Py_ssize_t)blen + klen;
            break;
        }
        case TAG_EXPIRE: {
            if (!FITS(pos, EXPIRE_HEAD))
                goto handback;
            uint32_t blen = get_u32(o + 9), klen = get_u32(o + 13);
            if (!FITS(pos, (uint64_t)EXPIRE_HEAD + blen + klen))
                goto handback;
            const unsigned char *b = o + EXPIRE_HEAD;
            PyObject *items[3] = {new_bucket(d, b, blen), new_bytes(b + blen, klen),
                                  expiry(get_i64(o + 1))};
            op = new_tuple(d->expire, 3, items);
            pos += EXPIRE_HEAD + (Py_ssize_t)blen + klen;
            break;
        }
        case TAG_FLUSH: {
            if (!FITS(pos, FLUSH_HEAD))
                goto handback;
            uint32_t blen = get_u32(o + 1);
            if (!FITS(pos, (uint64_t)FLUSH_HEAD + blen))
                goto handback;
            PyObject *items[1] = {new_bucket(d, o + FLUSH_HEAD, blen)};
            op = new_tuple(d->flush, 1, items);
            pos += FLUSH_HEAD + (Py_ssize_t)blen;
            break;
        }
        case TAG_FLUSH_ALL: {
            PyObject *items[1] = {Py_NewRef(Py_None)};
            op = new_tuple(d->flush, 1, items);
            pos += 1;
            break;
        }
        default:
            goto handback; /* a tag this file does not know: the Python decoder may */
        }
        if (op == NULL || PyList_Append(ops, op) < 0) {
            Py_XDECREF(op);
            Py_DECREF(ops);
            return -1;
        }
        Py_DECREF(op);
    }
    *out = ops;
    return 1;
handback:
    Py_DECREF(ops);
    return 0;
}

/* The ops of the payload ``p[0:n]``: decoded here, or by the fallback; NULL with no exception
 * when the fallback refused it (stop before the record), NULL with one on a real error. */
static PyObject *
record_ops(Decoder *d, const unsigned char *p, Py_ssize_t n)
{
    PyObject *ops = NULL;
    int done = decode_payload(d, p, n, &ops);
    if (done != 0)
        return done > 0 ? ops : NULL;
    PyObject *payload = PyBytes_FromStringAndSize((const char *)p, n);
    if (payload == NULL)
        return NULL;
    ops = PyObject_CallOneArg(d->fallback, payload);
    Py_DECREF(payload);
    if (ops == NULL && PyErr_ExceptionMatches(d->fallback_error))
        PyErr_Clear(); /* the reference reader reads this record again and says why */
    return ops;
}

/* A named tuple class: a subclass of tuple adding no instance storage. */
static int
is_record_type(PyObject *t)
{
    return PyType_Check(t) && PyType_IsSubtype((PyTypeObject *)t, &PyTuple_Type) &&
           ((PyTypeObject *)t)->tp_basicsize == PyTuple_Type.tp_basicsize &&
           ((PyTypeObject *)t)->tp_itemsize == PyTuple_Type.tp_itemsize &&
           ((PyTypeObject *)t)->tp_dictoffset == 0;
}

static int
parse_spec(PyObject *spec, Decoder *d)
{
    if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "spec must be (entry, put, remove, expire, flush, fallback, error)");
        return -1;
    }
    for (Py_ssize_t i = 0; i < 5; i++) {
        if (!is_record_type(PyTuple_GET_ITEM(spec, i))) {
            PyErr_SetString(PyExc_TypeError, "spec's first five items must be named tuples");
            return -1;
        }
    }
    d->entry = (PyTypeObject *)PyTuple_GET_ITEM(spec, 0);
    d->put = (PyTypeObject *)PyTuple_GET_ITEM(spec, 1);
    d->remove = (PyTypeObject *)PyTuple_GET_ITEM(spec, 2);
    d->expire = (PyTypeObject *)PyTuple_GET_ITEM(spec, 3);
    d->flush = (PyTypeObject *)PyTuple_GET_ITEM(spec, 4);
    d->fallback = PyTuple_GET_ITEM(spec, 5);
    d->fallback_error = PyTuple_GET_ITEM(spec, 6);
    d->bucket = NULL;
    if (!PyCallable_Check(d->fallback) || !PyExceptionClass_Check(d->fallback_error)) {
        PyErr_SetString(PyExc_TypeError, "spec's fallback must be callable, then an exception");
        return -1;
    }
    return 0;
}

static PyObject *
decode_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "decode_run(buf, pos, number, limit, spec)");
        return NULL;
    }
    Decoder d;
    if (parse_spec(args[4], &d) < 0)
        return NULL;
    Py_buffer view;
    Py_ssize_t pos, limit;
    uint64_t number;
    if (parse_walk(args, &view, &pos, &number, &limit) < 0)
        return NULL;
    PyObject *entries = PyList_New(0);
    if (entries == NULL)
        goto fail;
    const unsigned char *buf = view.buf;
    Py_ssize_t size = view.len;
    while (PyList_GET_SIZE(entries) < limit) {
        Py_ssize_t length = plain_record(buf, size, pos, number);
        if (length < 0)
            break;
        PyObject *ops = record_ops(&d, buf + pos + RECORD_HEADER, length);
        if (ops == NULL) {
            if (PyErr_Occurred())
                goto fail;
            break;
        }
        PyObject *items[3] = {PyLong_FromUnsignedLongLong(number), PyLong_FromSsize_t(pos), ops};
        PyObject *entry = new_tuple(d.entry, 3, items);
        if (entry == NULL)
            goto fail;
        int appended = PyList_Append(entries, entry);
        Py_DECREF(entry);
        if (appended < 0)
            goto fail;
        pos += RECORD_HEADER + length;
        number++;
    }
    PyBuffer_Release(&view);
    Py_XDECREF(d.bucket);
    return Py_BuildValue("(Nn)", entries, pos);
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(d.bucket);
    Py_XDECREF(entries);
    return NULL;
}

static PyMethodDef creader_methods[] = {
    {"scan_run", (PyCFunction)(void (*)(void))scan_run, METH_FASTCALL,
     "scan_run(buf, pos, number, limit) -> (pos, count)\n\n"
     "Move past up to limit plainly valid DATA records from pos (numbered from number)."},
    {"decode_run", (PyCFunction)(void (*)(void))decode_run, METH_FASTCALL,
     "decode_run(buf, pos, number, limit, spec) -> (entries, pos)\n\n"
     "The plainly valid DATA records from pos, up to limit, each decoded into "
     "entry(number, offset, ops)."},
    CRC32C_METHOD,
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef creader_module = {
    PyModuleDef_HEAD_INIT,
    "minidb.wal._creader",
    "The log reader's plainly valid records in C (see _creader.c).",
    -1,
    creader_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__creader(void)
{
    crc32c_init();
    PyObject *module = PyModule_Create(&creader_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "HARDWARE_CRC", hardware_crc ? Py_True : Py_False) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
