/* minidb.protocol._cresp: the RESP request decoder's hot loop in C (optional accelerator).
 *
 * Two functions, the C twins of the fast path of ``RespDecoder._parse`` (theory of operation:
 * the docstring of ``_resp.py``):
 *
 * ``scan_raw(buf, pos, out, limit, max_count, max_bulk) -> int`` reads the bytes of a read
 * before they are split into lines: from offset ``pos``, while ``len(out) < limit``, it takes
 * every multibulk command that is entirely present and plainly valid (the rules below) and
 * returns the offset of the first byte it did not take. The decoder splits only what is left.
 * Arguments are new bytes objects (one copy, as the split would make), except a command's name,
 * which is shared (``command_name``).
 *
 * ``scan(lines, i, last, out, limit, max_count, max_bulk) -> int`` does the same over the
 * decoder's list of CRLF-split lines (``last`` is the index of its unterminated tail), for the
 * rest of a read after something only Python handles. From line ``i`` on, it takes every
 * multibulk command that is entirely present and plainly valid: a ``*n`` line with
 * 1 <= n <= max_count, then n pairs of a ``$len`` line and a data line of exactly ``len``
 * bytes, len <= max_bulk, every number under Redis's string2ll rules. Each such command is
 * appended to ``out`` as a new list of the data lines themselves (no copy). It returns the
 * index of the first line it did not take.
 *
 * Anything else (an inline request, a command not yet complete, for ``scan`` a bulk whose
 * data holds a CRLF, ``*0``, any protocol error) stops the scan and is left to the Python code, which is
 * the reference: the scan never decides an error, so the two cannot disagree on one.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_cint.h"
#include "../_cslots.h"

/* Redis's string2ll for a non-negative number: digits only, no leading zero unless "0", at
 * most 20 characters, no overflow. A leading '-' is refused here: the scan only accepts
 * positive counts and lengths, and a negative one is the Python code's to judge. */
static int
parse_length(const char *s, Py_ssize_t n, long long *out)
{
    unsigned long long v = 0;
    if (n <= 0 || n >= 21)
        return 0;
    if (n > 1 && s[0] == '0')
        return 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        if (c < '0' || c > '9')
            return 0;
        if (v > (ULLONG_MAX - (c - '0')) / 10)
            return 0;
        v = v * 10 + (c - '0');
    }
    if (v > (unsigned long long)LLONG_MAX)
        return 0;
    *out = (long long)v;
    return 1;
}

/* The number after the one-byte prefix of a header line, or -1 if it is not plainly one. */
static long long
header_value(PyObject *line, char prefix)
{
    long long value;
    if (!PyBytes_CheckExact(line))
        return -1;
    Py_ssize_t size = PyBytes_GET_SIZE(line);
    const char *s = PyBytes_AS_STRING(line);
    if (size < 2 || s[0] != prefix || !parse_length(s + 1, size - 1, &value))
        return -1;
    return value;
}

/* The trailing arguments both scans share: limit, max_count, max_bulk. */
static int
read_limits(PyObject *const *args, Py_ssize_t *limit, long long *max_count, long long *max_bulk)
{
    *limit = PyLong_AsSsize_t(args[0]);
    *max_count = PyLong_AsLongLong(args[1]);
    *max_bulk = PyLong_AsLongLong(args[2]);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *
scan(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "scan() takes 7 arguments");
        return NULL;
    }
    PyObject *lines = args[0];
    PyObject *out = args[3];
    if (!PyList_CheckExact(lines) || !PyList_CheckExact(out)) {
        PyErr_SetString(PyExc_TypeError, "scan() needs lists for lines and out");
        return NULL;
    }
    Py_ssize_t limit, i = PyLong_AsSsize_t(args[1]), last = PyLong_AsSsize_t(args[2]);
    long long max_count, max_bulk;
    if (PyErr_Occurred() || read_limits(args + 4, &limit, &max_count, &max_bulk) < 0)
        return NULL;
    if (last >= PyList_GET_SIZE(lines))
        last = PyList_GET_SIZE(lines) - 1;  /* never read past the list, whatever we are told */
    if (i < 0)
        i = 0;

    while (i < last && PyList_GET_SIZE(out) < limit) {
        long long n = header_value(PyList_GET_ITEM(lines, i), '*');
        if (n < 1 || n > max_count || n > (last - i) / 2 || i + 2 * n >= last)
            break;
        Py_ssize_t k;
        for (k = 0; k < n; k++) {
            PyObject *data = PyList_GET_ITEM(lines, i + 2 + 2 * k);
            long long size = header_value(PyList_GET_ITEM(lines, i + 1 + 2 * k), '$');
            if (size < 0 || size > max_bulk || !PyBytes_CheckExact(data)
                || PyBytes_GET_SIZE(data) != size)
                break;
        }
        if (k < n)
            break;
        PyObject *argv = PyList_New((Py_ssize_t)n);
        if (argv == NULL)
            return NULL;
        for (k = 0; k < n; k++) {
            PyObject *data = PyList_GET_ITEM(lines, i + 2 + 2 * k);
            Py_INCREF(data);
            PyList_SET_ITEM(argv, k, data);
        }
        int failed = PyList_Append(out, argv);
        Py_DECREF(argv);
        if (failed)
            return NULL;
        i += 2 * (Py_ssize_t)n + 1;
    }
    return PyLong_FromSsize_t(i);
}

/* The number of a header at b[p] ('*' or '$' already checked) ended by CRLF within the
 * buffer; sets *next to the byte after the CRLF. -1 if not plainly a number or not all here. */
static long long
raw_header(const char *b, Py_ssize_t p, Py_ssize_t end, Py_ssize_t *next)
{
    /* The short forms most headers take ("*2\r\n", "$16\r\n") without the scan; exactly
     * what the general path below answers for them (a leading zero is left to it). */
    if (p + 3 < end && b[p + 1] >= '0' && b[p + 1] <= '9') {
        if (b[p + 2] == '\r' && b[p + 3] == '\n') {
            *next = p + 4;
            return b[p + 1] - '0';
        }
        if (p + 4 < end && b[p + 1] != '0' && b[p + 2] >= '0' && b[p + 2] <= '9'
            && b[p + 3] == '\r' && b[p + 4] == '\n') {
            *next = p + 5;
            return (b[p + 1] - '0') * 10 + (b[p + 2] - '0');
        }
    }
    long long value;
    Py_ssize_t room = end - p - 1;
    if (room > 21)
        room = 21;  /* 20 digits and the CR: a longer field is the Python code's to refuse */
    if (room <= 0)
        return -1;
    const char *cr = memchr(b + p + 1, '\r', (size_t)room);
    if (cr == NULL || cr + 1 >= b + end || cr[1] != '\n')
        return -1;
    if (!parse_length(b + p + 1, cr - (b + p + 1), &value))
        return -1;
    *next = (cr - b) + 2;
    return value;
}

/* Command names as shared objects. A pipeline repeats a few names (GET, SET...), and each is
 * looked up several times downstream: the command table, the set of plain reads, the counts
 * per name. A new bytes object per command pays its hash and, in every dict, a compare of
 * contents; the one object per name seen before has its hash cached and matches by identity.
 * The first NAMES_KEPT distinct names of printable ASCII up to NAME_MAX_BYTES are kept for
 * the life of the process (bounded: a client sending made-up names fills it once, then gets
 * new objects, as before); equal bytes either way, so nothing else can tell. */
#define NAME_MAX_BYTES 24
#define NAMES_KEPT 256
#define NAME_SLOTS 512 /* open addressing, at most half full */
static PyObject *names[NAME_SLOTS];
static int names_kept;

static PyObject *
command_name(const char *s, Py_ssize_t n)
{
    if (n > NAME_MAX_BYTES)
        return PyBytes_FromStringAndSize(s, n);
    size_t h = (size_t)n;
    for (Py_ssize_t k = 0; k < n; k++)
        h = h * 31 + (unsigned char)s[k];
    size_t slot = h & (NAME_SLOTS - 1);
    for (; names[slot] != NULL; slot = (slot + 1) & (NAME_SLOTS - 1)) {
        PyObject *name = names[slot];
        if (PyBytes_GET_SIZE(name) == n && memcmp(PyBytes_AS_STRING(name), s, (size_t)n) == 0)
            return Py_NewRef(name);
    }
    PyObject *name = PyBytes_FromStringAndSize(s, n);
    if (name == NULL || names_kept >= NAMES_KEPT)
        return name;
    for (Py_ssize_t k = 0; k < n; k++)
        if ((unsigned char)s[k] < 0x21 || (unsigned char)s[k] > 0x7e)
            return name;
    (void)PyObject_Hash(name); /* cached in the object: never computed again */
    names[slot] = Py_NewRef(name);
    names_kept++;
    return name;
}

static PyObject *
scan_raw(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "scan_raw() takes 6 arguments");
        return NULL;
    }
    PyObject *buf = args[0];
    PyObject *out = args[2];
    if (!PyBytes_CheckExact(buf) || !PyList_CheckExact(out)) {
        PyErr_SetString(PyExc_TypeError, "scan_raw() needs bytes and a list");
        return NULL;
    }
    Py_ssize_t limit, pos = PyLong_AsSsize_t(args[1]);
    long long max_count, max_bulk;
    if (PyErr_Occurred() || read_limits(args + 3, &limit, &max_count, &max_bulk) < 0)
        return NULL;
    const char *b = PyBytes_AS_STRING(buf);
    Py_ssize_t end = PyBytes_GET_SIZE(buf);
    if (pos < 0)
        pos = 0;

    while (pos < end && PyList_GET_SIZE(out) < limit) {
        Py_ssize_t p;
        if (b[pos] != '*')
            break;
        long long n = raw_header(b, pos, end, &p);
        if (n < 1 || n > max_count)
            break;
        /* First pass: the whole command is here and plainly valid. Each argument takes at
         * least 6 bytes, so this ends quickly when a huge count meets a short buffer. */
        Py_ssize_t first = p;
        long long k;
        for (k = 0; k < n; k++) {
            long long size;
            if (p >= end || b[p] != '$')
                break;
            size = raw_header(b, p, end, &p);
            if (size < 0 || size > max_bulk || size > end - p - 2)
                break;
            p += (Py_ssize_t)size;
            if (b[p] != '\r' || b[p + 1] != '\n')
                break;
            p += 2;
        }
        if (k < n)
            break;
        /* Second pass: make the arguments. */
        PyObject *argv = PyList_New((Py_ssize_t)n);
        if (argv == NULL)
            return NULL;
        p = first;
        for (k = 0; k < n; k++) {
            long long size = raw_header(b, p, end, &p);
            PyObject *data = k == 0 ? command_name(b + p, (Py_ssize_t)size)
                                    : PyBytes_FromStringAndSize(b + p, (Py_ssize_t)size);
            if (data == NULL) {
                Py_DECREF(argv);
                return NULL;
            }
            PyList_SET_ITEM(argv, (Py_ssize_t)k, data);
            p += (Py_ssize_t)size + 2;
        }
        int failed = PyList_Append(out, argv);
        Py_DECREF(argv);
        if (failed)
            return NULL;
        pos = p;
    }
    return PyLong_FromSsize_t(pos);
}

/* -- take_whole: RespDecoder.take_whole's checks and call, reading the decoder's slots -------- */

/* The decoder's slots take_whole reads, by offset in its instances (resolved once). */
enum {
    D_AUTHENTICATED, D_FRESH, D_OVERFLOW, D_ERROR, D_CHUNKS, D_RAW, D_ARGV, D_LI, D_LINES,
    D_COUNT_LIMIT, D_BULK_LIMIT, D_BYTES_FED, D_COMMANDS, D_FIELDS
};
static const char *const decoder_fields[D_FIELDS] = {
    "_authenticated", "_fresh", "_overflow", "_error", "_chunks", "_raw", "_argv", "_li",
    "_lines", "_count_limit", "_bulk_limit", "_bytes_fed", "_commands",
};
static Py_ssize_t decoder_offsets[D_FIELDS];
static PyTypeObject *decoder_type;     /* the class whose offsets these are */
static PyObject *python_take_whole;    /* its Python take_whole: the reference and fallback */
static PyObject *scan_raw_function;    /* this module's scan_raw, lent to take */

#define FIELD(self, i) (*(PyObject **)((char *)(self) + decoder_offsets[i]))

static PyObject *
take_whole(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        goto python;
    PyObject *data = args[0];
    if (Py_TYPE(self) != decoder_type)
        goto python;
    for (int i = 0; i < D_FIELDS; i++) {
        if (FIELD(self, i) == NULL)
            goto python;  /* unset: Python raises the AttributeError */
    }
    PyObject *lines = FIELD(self, D_LINES), *chunks = FIELD(self, D_CHUNKS);
    PyObject *li_obj = FIELD(self, D_LI);
    if (!PyList_CheckExact(lines) || !PyList_CheckExact(chunks) || !PyLong_CheckExact(li_obj)
        || PyList_GET_SIZE(lines) == 0)
        goto python;
    int authenticated = PyObject_IsTrue(FIELD(self, D_AUTHENTICATED));
    int overflow = PyObject_IsTrue(FIELD(self, D_OVERFLOW));
    if (authenticated < 0 || overflow < 0)
        return NULL;
    PyObject *last = PyList_GET_ITEM(lines, PyList_GET_SIZE(lines) - 1);
    if (!PyBytes_CheckExact(last))
        goto python;
    Py_ssize_t li = PyLong_AsSsize_t(li_obj);
    if (li == -1 && PyErr_Occurred())
        return NULL;
    if (!authenticated || FIELD(self, D_FRESH) != Py_None || overflow
        || FIELD(self, D_ERROR) != Py_None || !PyBytes_CheckExact(data)
        || PyList_GET_SIZE(chunks) != 0 || FIELD(self, D_RAW) != Py_None
        || FIELD(self, D_ARGV) != Py_None || li != PyList_GET_SIZE(lines) - 1
        || PyBytes_GET_SIZE(last) != 0)
        Py_RETURN_NONE;
    PyObject *take_args[5] = {
        scan_raw_function, data, FIELD(self, D_COUNT_LIMIT), FIELD(self, D_BULK_LIMIT), args[2]
    };
    PyObject *taken = PyObject_Vectorcall(args[1], take_args, 5, NULL);
    if (taken == NULL || taken == Py_None)
        return taken;
    /* self._bytes_fed += len(data); self._commands += len(taken[0]) */
    Py_ssize_t count;
    if (PyTuple_CheckExact(taken) && PyTuple_GET_SIZE(taken) > 0
        && PyList_CheckExact(PyTuple_GET_ITEM(taken, 0))) {
        count = PyList_GET_SIZE(PyTuple_GET_ITEM(taken, 0));  /* the express lane's */
    }
    else {
        PyObject *first = PySequence_GetItem(taken, 0);
        count = first == NULL ? -1 : PyObject_Size(first);
        Py_XDECREF(first);
    }
    if (count < 0)
        goto error;
    Py_ssize_t by[2] = {PyBytes_GET_SIZE(data), count};
    int fields[2] = {D_BYTES_FED, D_COMMANDS};
    for (int k = 0; k < 2; k++) {
        PyObject *sum = int_plus(FIELD(self, fields[k]), by[k]);
        if (sum == NULL)
            goto error;
        Py_SETREF(FIELD(self, fields[k]), sum);
    }
    return taken;
error:
    Py_DECREF(taken);
    return NULL;
python:
    {
        PyObject *call_args[4] = {self, nargs > 0 ? args[0] : NULL, nargs > 1 ? args[1] : NULL,
                                  nargs > 2 ? args[2] : NULL};
        if (nargs > 3) {
            PyErr_SetString(PyExc_TypeError, "take_whole(data, take, lane)");
            return NULL;
        }
        return PyObject_Vectorcall(python_take_whole, call_args, 1 + nargs, NULL);
    }
}

static PyMethodDef take_whole_def = {
    "take_whole", (PyCFunction)(void (*)(void))take_whole, METH_FASTCALL,
    "RespDecoder.take_whole in C: its checks read the decoder's slots directly."
};

/* take_whole_method(cls, python_take_whole) -> a C take_whole for cls (RespDecoder). */
static PyObject *
take_whole_method(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "take_whole_method(cls, python_take_whole)");
        return NULL;
    }
    if (decoder_type != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "take_whole_method() serves one decoder class");
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)args[0];
    int found = member_offsets(tp, decoder_fields, D_FIELDS, decoder_offsets);
    if (found < 0)
        return NULL;
    if (found < D_FIELDS) {
        PyErr_Format(PyExc_TypeError, "%R has no plain slot %s", args[0], decoder_fields[found]);
        return NULL;
    }
    scan_raw_function = PyObject_GetAttrString(module, "scan_raw");
    if (scan_raw_function == NULL)
        return NULL;
    decoder_type = (PyTypeObject *)Py_NewRef(args[0]);
    python_take_whole = Py_NewRef(args[1]);
    return PyDescr_NewMethod(tp, &take_whole_def);
}

static PyMethodDef cresp_methods[] = {
    {"take_whole_method", (PyCFunction)(void (*)(void))take_whole_method, METH_FASTCALL,
     "take_whole_method(cls, python_take_whole) -> a C take_whole method for the decoder "
     "class cls (which reads its slots directly; anything else goes to python_take_whole)."},
    {"scan_raw", (PyCFunction)(void (*)(void))scan_raw, METH_FASTCALL,
     "scan_raw(buf, pos, out, limit, max_count, max_bulk) -> offset of the first byte not "
     "taken.\n\nAppend to out every complete, plainly valid multibulk command from buf[pos:]."},
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(lines, i, last, out, limit, max_count, max_bulk) -> index of the first line not "
     "taken.\n\nAppend to out every complete, plainly valid multibulk command from lines[i]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef cresp_module = {
    PyModuleDef_HEAD_INIT,
    "minidb.protocol._cresp",
    "The RESP request decoder's hot loop in C (see _cresp.c).",
    -1,
    cresp_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__cresp(void)
{
    return PyModule_Create(&cresp_module);
}
