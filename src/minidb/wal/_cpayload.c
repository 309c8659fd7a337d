/* minidb.wal._cpayload: packing many PUTs into one payload in C (optional accelerator).
 *
 * Three functions, C twins of pure loops in ``_payload`` (the format is ``docs/wal-format.md``,
 * "Operation payload" and "Records"): ``pack_puts_from`` below, ``encode_plain_puts``, the
 * common case of ``encode_ops``, and ``frame_groups``, the owner's whole group of records
 * (further down).
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

#include "_crc32c.h"

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

/* The payload size of ``ops`` if it is a non-empty list of operations that are all
 * ``put_type`` instances (exactly) without expiry, with bytes fields that fit a u32; -1 if
 * anything is otherwise (the general encoder takes it, and says why when it refuses). */
static Py_ssize_t
plain_puts_size(PyObject *ops, PyTypeObject *put_type)
{
    if (!PyList_CheckExact(ops))
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(ops), total = 0;
    if (n == 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = PyList_GET_ITEM(ops, i);
        if (Py_TYPE(op) != put_type || PyTuple_GET_SIZE(op) != 4 ||
            PyTuple_GET_ITEM(op, 3) != Py_None)
            return -1;
        PyObject *b = PyTuple_GET_ITEM(op, 0), *k = PyTuple_GET_ITEM(op, 1),
                 *v = PyTuple_GET_ITEM(op, 2);
        if (!PyBytes_CheckExact(b) || !PyBytes_CheckExact(k) || !PyBytes_CheckExact(v))
            return -1;
        Py_ssize_t bl = PyBytes_GET_SIZE(b), kl = PyBytes_GET_SIZE(k), vl = PyBytes_GET_SIZE(v);
        if ((uint64_t)bl > UINT32_MAX || (uint64_t)kl > UINT32_MAX || (uint64_t)vl > UINT32_MAX)
            return -1;
        total += PUT_HEAD + bl + kl + vl;
    }
    return total;
}

/* The PUTs of ``ops`` (which ``plain_puts_size`` accepted) at ``p``; the byte after them. */
static unsigned char *
write_plain_puts(unsigned char *p, PyObject *ops)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ops); i++) {
        PyObject *op = PyList_GET_ITEM(ops, i);
        PyObject *b = PyTuple_GET_ITEM(op, 0);
        p = write_put(p, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), PyTuple_GET_ITEM(op, 1),
                      PyTuple_GET_ITEM(op, 2));
    }
    return p;
}

static int
is_tuple_type(PyObject *type)
{
    /* (its items are read as a tuple's: a type that is not one would be read past) */
    return PyType_Check(type) && PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type);
}

/* ``encode_plain_puts(ops, put_type) -> bytes | None``: the payload of a list of operations
 * that are all ``put_type`` instances (exactly) without expiry, e.g. a BULK frame's journal
 * group; ``None`` as soon as one is anything else, for the general encoder to take. */
static PyObject *
encode_plain_puts(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !is_tuple_type(args[1])) {
        PyErr_SetString(PyExc_TypeError, "encode_plain_puts(ops: list, put_type: a tuple type)");
        return NULL;
    }
    Py_ssize_t total = plain_puts_size(args[0], (PyTypeObject *)args[1]);
    if (total < 0)
        Py_RETURN_NONE;
    PyObject *payload = PyBytes_FromStringAndSize(NULL, total);
    if (payload == NULL)
        return NULL;
    write_plain_puts((unsigned char *)PyBytes_AS_STRING(payload), args[0]);
    return payload;
}

/* -- framing a group of records ----------------------------------------------------------
 *
 * ``frame_groups(put_type, encode_ops, first_number, groups) -> bytes`` is
 * ``_payload.frame_groups_python``: each group of ops (a list) becomes one DATA record,
 * numbered from ``first_number``, framed as ``_format.encode_records`` frames it (length u32,
 * type u8, CRC32C of those five bytes, CRC32C of number u64 | type u8 | payload, payload), and
 * all of them are joined. A group of puts without expiry (every SET, an MSET) is encoded here;
 * any other is handed to ``encode_ops`` (whose errors propagate) and framed here.
 *
 * Why C: the owner logs a group of hundreds of SETs at ``-P 16``; in Python each cost two
 * struct packs and a join for its payload, then three packs, two checksum calls and three
 * concatenations for its frame, about a quarter of what a pipelined SET cost the server.
 *
 * CRC32C (Castagnoli, as ``google-crc32c`` computes it): the SSE4.2 ``crc32`` instruction when
 * the CPU has it (checked at import), else a slicing-by-8 table: ``_crc32c.h``, shared with
 * ``_creader.c``, which reads these records back. */

#define RECORD_HEADER 13 /* length u32, type u8, header_crc u32, crc u32 */
#define HEADER_CRC_SPAN 5 /* what header_crc covers: length and type */
#define TYPE_DATA 1
#define MAX_PAYLOAD ((1u << 30) - 1)


/* Frame the payload already at ``p + RECORD_HEADER`` (``length`` bytes) as DATA record
 * ``number``; the byte after it. */
static unsigned char *
frame_record(unsigned char *p, uint64_t number, Py_ssize_t length)
{
    unsigned char numbered[9];
    for (int i = 0; i < 8; i++)
        numbered[i] = (unsigned char)(number >> (8 * i));
    numbered[8] = TYPE_DATA;
    put_u32(p, (uint32_t)length);
    p[4] = TYPE_DATA;
    put_u32(p + 5, crc32c_extend(0, p, HEADER_CRC_SPAN));
    uint32_t crc = crc32c_extend(0, numbered, sizeof numbered);
    put_u32(p + 9, crc32c_extend(crc, p + RECORD_HEADER, (size_t)length));
    return p + RECORD_HEADER + length;
}

static PyObject *
frame_groups(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !is_tuple_type(args[0]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "frame_groups(put_type, encode_ops, first_number, groups: list)");
        return NULL;
    }
    PyTypeObject *put_type = (PyTypeObject *)args[0];
    PyObject *encode_ops = args[1], *groups = args[3];
    uint64_t number = PyLong_AsUnsignedLongLong(args[2]);
    if (number == (uint64_t)-1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(groups), total = 0;
    /* (the sizes of the groups encoded here are taken again before each is written: an
     * ``encode_ops`` of another may have changed them, and nothing is written past them) */
    if (n > 0 && number > UINT64_MAX - (uint64_t)(n - 1)) {
        PyErr_SetString(PyExc_OverflowError, "frame_groups: record numbers past 2**64 - 1");
        return NULL;
    }
    /* The payloads ``encode_ops`` made (NULL where the group is encoded here), and each
     * payload's size. A group list the caller changes meanwhile is not ours to follow: the
     * owner's journal does not change while it is logged. */
    PyObject **encoded = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    Py_ssize_t *sizes = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    PyObject *framed = NULL;
    if (encoded == NULL || sizes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_GET_SIZE(groups) != n) { /* an encode_ops call changed the list */
            PyErr_SetString(PyExc_RuntimeError, "frame_groups: the groups changed while framed");
            goto done;
        }
        PyObject *group = PyList_GET_ITEM(groups, i);
        Py_ssize_t size = plain_puts_size(group, put_type);
        if (size < 0) {
            Py_INCREF(group); /* held while Python code runs */
            PyObject *payload = PyObject_CallOneArg(encode_ops, group);
            Py_DECREF(group);
            if (payload == NULL)
                goto done;
            encoded[i] = payload;
            if (!PyBytes_CheckExact(payload)) {
                PyErr_SetString(PyExc_TypeError, "frame_groups: encode_ops returned no bytes");
                goto done;
            }
            size = PyBytes_GET_SIZE(payload);
        }
        if ((uint64_t)size > MAX_PAYLOAD) {
            PyErr_Format(PyExc_ValueError, "record payload of %zd bytes exceeds %u", size,
                         MAX_PAYLOAD);
            goto done;
        }
        sizes[i] = size;
        total += RECORD_HEADER + size;
    }
    if (n != PyList_GET_SIZE(groups)) { /* the last encode_ops call changed the list */
        PyErr_SetString(PyExc_RuntimeError, "frame_groups: the groups changed while framed");
        goto done;
    }
    framed = PyBytes_FromStringAndSize(NULL, total);
    if (framed == NULL)
        goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(framed);
    for (Py_ssize_t i = 0; i < n; i++, number++) {
        PyObject *group = PyList_GET_ITEM(groups, i);
        if (encoded[i] != NULL) {
            memcpy(p + RECORD_HEADER, PyBytes_AS_STRING(encoded[i]), (size_t)sizes[i]);
        } else if (plain_puts_size(group, put_type) == sizes[i]) {
            write_plain_puts(p + RECORD_HEADER, group);
        } else { /* an encode_ops call changed a group measured before it: never write past */
            PyErr_SetString(PyExc_RuntimeError, "frame_groups: the groups changed while framed");
            Py_CLEAR(framed);
            goto done;
        }
        p = frame_record(p, number, sizes[i]);
    }
done:
    if (encoded != NULL) {
        for (Py_ssize_t i = 0; i < n; i++)
            Py_XDECREF(encoded[i]);
        PyMem_Free(encoded);
    }
    PyMem_Free(sizes);
    return framed;
}

static PyMethodDef cpayload_methods[] = {
    {"pack_puts_from", (PyCFunction)(void (*)(void))pack_puts_from, METH_FASTCALL,
     "pack_puts_from(bucket, mapping, pos, limit) -> (payload or None, next pos)\n\n"
     "The PUT without expiry of each item of the dict whose value is bytes, from PyDict_Next "
     "position pos, until the payload reaches limit bytes."},
    {"encode_plain_puts", (PyCFunction)(void (*)(void))encode_plain_puts, METH_FASTCALL,
     "encode_plain_puts(ops, put_type) -> payload, or None unless every op is a put_type "
     "without expiry."},
    {"frame_groups", (PyCFunction)(void (*)(void))frame_groups, METH_FASTCALL,
     "frame_groups(put_type, encode_ops, first_number, groups) -> bytes\n\n"
     "Each group of ops as one framed DATA record numbered from first_number, joined."},
    CRC32C_METHOD,
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
    crc32c_init();
    return PyModule_Create(&cpayload_module);
}
