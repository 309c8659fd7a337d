/* minidb.wal._cpayload: packing many PUTs into one payload in C (optional accelerator).
 *
 * Two functions, C twins of pure loops in ``_payload`` (the format is ``docs/wal-format.md``,
 * "Operation payload"): ``pack_puts_from`` below, and ``encode_plain_puts``, the common case of
 * ``encode_ops`` (further down).
 *
 *
 * ``pack_puts_from(bucket, mapping, pos, limit) -> (payload | None, next pos)`` walks the dict
 * ``mapping`` from the ``PyDict_Next`` position ``pos`` and encodes every item whose value is
 * exactly ``bytes`` as one PUT without expiry (tag 1, expiry i64 minimum, three u32 lengths,
 * bucket, key, value; little-endian), skipping items with any other value (keys with an expiry:
 * the caller encodes those). It stops after the item that brings the payload to ``limit`` bytes
 * or more, and returns the payload with the position to resume from; ``None`` once no item is
 * left. A payload is therefore the same concatenation ``coalesce`` makes of the one-key
 * payloads, in the dict's order.
 *
 * Why C: a checkpoint encodes every key of the store, on a thread that holds the GIL the
 * data owner needs. In Python that was about 1.4 us a key (generator, tuple, struct pack, join,
 * coalesce); here it is a copy of the bytes.
 *
 * The dict must not change between two calls (the caller walks a private copy, or the live map
 * on the owner's thread with nothing else running); the wrapper checks its size.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define PUT_HEAD 21 /* tag u8, expire_at_ms i64, bucket_len u32, key_len u32, value_len u32 */
#define TAG_PUT 1

static void
put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* One PUT without expiry at ``p``; returns the byte after it. */
static unsigned char *
write_put(unsigned char *p, const char *bucket, Py_ssize_t blen, PyObject *key, PyObject *value)
{
    Py_ssize_t klen = PyBytes_GET_SIZE(key), vlen = PyBytes_GET_SIZE(value);
    p[0] = TAG_PUT;
    /* NO_EXPIRY = -(2**63): seven zero bytes, then 0x80 (little-endian). */
    memset(p + 1, 0, 7);
    p[8] = 0x80;
    put_u32(p + 9, (uint32_t)blen);
    put_u32(p + 13, (uint32_t)klen);
    put_u32(p + 17, (uint32_t)vlen);
    p += PUT_HEAD;
    memcpy(p, bucket, (size_t)blen);
    p += blen;
    memcpy(p, PyBytes_AS_STRING(key), (size_t)klen);
    p += klen;
    memcpy(p, PyBytes_AS_STRING(value), (size_t)vlen);
    return p + vlen;
}

static PyObject *
pack_puts_from(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "pack_puts_from(bucket, mapping, pos, limit)");
        return NULL;
    }
    PyObject *bucket = args[0], *mapping = args[1];
    if (!PyBytes_CheckExact(bucket) || !PyDict_CheckExact(mapping)) {
        PyErr_SetString(PyExc_TypeError, "pack_puts_from: bucket must be bytes, mapping a dict");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[2]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t limit = PyLong_AsSsize_t(args[3]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t blen = PyBytes_GET_SIZE(bucket);
    if ((uint64_t)blen > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "operation field too long to encode: bucket");
        return NULL;
    }

    /* First pass: how many items, and how many bytes, go into this payload. */
    Py_ssize_t pos = start, total = 0, count = 0;
    PyObject *key, *value;
    while (PyDict_Next(mapping, &pos, &key, &value)) {
        if (!PyBytes_CheckExact(value))
            continue;
        if (!PyBytes_CheckExact(key)) {
            PyErr_Format(PyExc_TypeError, "pack_puts_from: a key is %.100s, not bytes",
                         Py_TYPE(key)->tp_name);
            return NULL;
        }
        Py_ssize_t klen = PyBytes_GET_SIZE(key), vlen = PyBytes_GET_SIZE(value);
        if ((uint64_t)klen > UINT32_MAX || (uint64_t)vlen > UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "operation field too long to encode");
            return NULL;
        }
        total += PUT_HEAD + blen + klen + vlen;
        count++;
        if (total >= limit)
            break;
    }
    Py_ssize_t end = pos;
    if (count == 0)
        return Py_BuildValue("(On)", Py_None, end);

    /* Second pass: the same items again (the dict has not changed: the GIL is held). */
    PyObject *payload = PyBytes_FromStringAndSize(NULL, total);
    if (payload == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(payload);
    const char *bucket_bytes = PyBytes_AS_STRING(bucket);
    pos = start;
    while (count && PyDict_Next(mapping, &pos, &key, &value)) {
        if (!PyBytes_CheckExact(value))
            continue;
        p = write_put(p, bucket_bytes, blen, key, value);
        count--;
    }
    PyObject *result = Py_BuildValue("(Nn)", payload, end);
    return result;
}

/* ``encode_plain_puts(ops, put_type) -> bytes | None``: the payload of a list of operations
 * that are all ``put_type`` instances (exactly) without expiry, e.g. a BULK frame's journal
 * group; ``None`` as soon as one is anything else, for the general encoder to take. */
static PyObject *
encode_plain_puts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyType_Check(args[1]) ||
        !PyType_IsSubtype((PyTypeObject *)args[1], &PyTuple_Type)) {
        /* (its items are read as a tuple's: a type that is not one would be read past) */
        PyErr_SetString(PyExc_TypeError, "encode_plain_puts(ops: list, put_type: a tuple type)");
        return NULL;
    }
    PyObject *ops = args[0];
    PyTypeObject *put_type = (PyTypeObject *)args[1];
    Py_ssize_t n = PyList_GET_SIZE(ops), total = 0;
    if (n == 0)
        Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = PyList_GET_ITEM(ops, i);
        if (Py_TYPE(op) != put_type || PyTuple_GET_SIZE(op) != 4 ||
            PyTuple_GET_ITEM(op, 3) != Py_None)
            Py_RETURN_NONE;
        PyObject *b = PyTuple_GET_ITEM(op, 0), *k = PyTuple_GET_ITEM(op, 1),
                 *v = PyTuple_GET_ITEM(op, 2);
        if (!PyBytes_CheckExact(b) || !PyBytes_CheckExact(k) || !PyBytes_CheckExact(v))
            Py_RETURN_NONE;
        Py_ssize_t bl = PyBytes_GET_SIZE(b), kl = PyBytes_GET_SIZE(k), vl = PyBytes_GET_SIZE(v);
        if ((uint64_t)bl > UINT32_MAX || (uint64_t)kl > UINT32_MAX || (uint64_t)vl > UINT32_MAX)
            Py_RETURN_NONE; /* the general encoder says why */
        total += PUT_HEAD + bl + kl + vl;
    }
    PyObject *payload = PyBytes_FromStringAndSize(NULL, total);
    if (payload == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(payload);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = PyList_GET_ITEM(ops, i);
        PyObject *b = PyTuple_GET_ITEM(op, 0);
        p = write_put(p, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), PyTuple_GET_ITEM(op, 1),
                      PyTuple_GET_ITEM(op, 2));
    }
    return payload;
}

static PyMethodDef cpayload_methods[] = {
    {"pack_puts_from", (PyCFunction)(void (*)(void))pack_puts_from, METH_FASTCALL,
     "pack_puts_from(bucket, mapping, pos, limit) -> (payload or None, next pos)\n\n"
     "The PUT without expiry of each item of the dict whose value is bytes, from PyDict_Next "
     "position pos, until the payload reaches limit bytes."},
    {"encode_plain_puts", (PyCFunction)(void (*)(void))encode_plain_puts, METH_FASTCALL,
     "encode_plain_puts(ops, put_type) -> payload, or None unless every op is a put_type "
     "without expiry."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef cpayload_module = {
    PyModuleDef_HEAD_INIT,
    "minidb.wal._cpayload",
    "Packing a bucket's keys into snapshot payloads in C (see _cpayload.c).",
    -1,
    cpayload_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__cpayload(void)
{
    return PyModule_Create(&cpayload_module);
}
