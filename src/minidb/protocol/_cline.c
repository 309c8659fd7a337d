/* minidb.protocol._cline: the line decoder's common lines in C (optional accelerator).
 *
 * The C twin of two loops of ``RequestDecoder`` (``_line.py``; theory of operation there):
 *
 * ``decode_lines(buffer, want, parse) -> (requests, used, at_header)`` takes the first ``want``
 * complete lines of ``buffer`` (each ended by LF; an incomplete last line is left) and makes
 * each a request, as ``next_requests`` does with a split and a regex per line: a plain SET
 * (``_PLAIN_SET``: ``SET <name> <name> <value>``, the value at most ``max_value`` bytes of
 * ASCII without CR) becomes a ``Set``, a plain GET or DEL (``_FAST``: ``GET <name> <name>``
 * exactly) a ``Get`` or ``Delete``, and any other line goes to ``parse(line)``, the Python
 * parser, which is the judge of everything else (errors, other verbs, CRLF, UTF-8). It stops
 * before a line ``parse`` answers with ``bulk_header`` (a frame starts there: the decoder's
 * frame path takes it), and returns the requests, the bytes of ``buffer`` used (whole lines)
 * and whether a header stopped it.
 *
 * ``plain_rows(body) -> list[Set] | None``: the rows of a frame (``body``, lines each ended by
 * LF) if every one is a plain SET, else None (then ``_frame_of``'s general path runs).
 *
 * A name is 1 to ``max_name`` bytes of ``[A-Za-z0-9_.:/-]``. Nothing here decides an error.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static PyObject *GetType, *SetType, *DeleteType, *BulkHeader;
static Py_ssize_t max_name, max_value;
static unsigned char name_char[256];

/* A request named tuple of ``type`` over ``n`` slices of ``line`` (start, length pairs). */
static PyObject *
request_of(PyObject *type, const char *line, const Py_ssize_t *spans, Py_ssize_t n)
{
    PyObject *tuple = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, n);
    if (tuple == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyBytes_FromStringAndSize(line + spans[2 * i], spans[2 * i + 1]);
        if (item == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, item);
    }
    return tuple;
}

/* The length of the name at ``s`` (at most ``n`` bytes available) if one is there and the
 * byte after it is ``end`` (or it reaches ``n`` and ``end`` is 0); else 0. */
static Py_ssize_t
name_at(const unsigned char *s, Py_ssize_t n, unsigned char end)
{
    Py_ssize_t k = 0;
    while (k < n && name_char[s[k]])
        k++;
    if (k == 0 || k > max_name)
        return 0;
    if (end ? (k < n && s[k] == end) : k == n)
        return k;
    return 0;
}

/* The request of ``line`` (``n`` bytes, no LF: lines are cut at it) if it is a plain SET,
 * GET or DEL; NULL with no error set if it is not one. */
static PyObject *
plain_request(const char *line, Py_ssize_t n)
{
    const unsigned char *s = (const unsigned char *)line;
    if (n < 4 || s[3] != ' ')
        return NULL;
    PyObject *type;
    if (memcmp(s, "SET", 3) == 0)
        type = SetType;
    else if (memcmp(s, "GET", 3) == 0)
        type = GetType;
    else if (memcmp(s, "DEL", 3) == 0)
        type = DeleteType;
    else
        return NULL;
    Py_ssize_t spans[6];
    Py_ssize_t at = 4;
    Py_ssize_t bucket = name_at(s + at, n - at, ' ');
    if (bucket == 0)
        return NULL;
    spans[0] = at;
    spans[1] = bucket;
    at += bucket + 1;
    Py_ssize_t key = name_at(s + at, n - at, type == SetType ? ' ' : 0);
    if (key == 0)
        return NULL;
    spans[2] = at;
    spans[3] = key;
    if (type != SetType)
        return request_of(type, line, spans, 2);
    at += key + 1;
    Py_ssize_t length = n - at;
    if (length > max_value)
        return NULL;
    for (Py_ssize_t k = at; k < n; k++) {
        if (s[k] >= 0x80 || s[k] == '\r')
            return NULL;
    }
    spans[4] = at;
    spans[5] = length;
    return request_of(type, line, spans, 3);
}

static PyObject *
decode_lines(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode_lines(bytes, want, parse)");
        return NULL;
    }
    if (SetType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "decode_lines() before bind()");
        return NULL;
    }
    const char *buf = PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t want = PyLong_AsSsize_t(args[1]);
    if (want == -1 && PyErr_Occurred())
        return NULL;
    PyObject *parse = args[2];
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    int at_header = 0;
    while (PyList_GET_SIZE(out) < want) {
        const char *lf = memchr(buf + pos, '\n', size - pos);
        if (lf == NULL)
            break;
        Py_ssize_t n = lf - (buf + pos);
        PyObject *request = plain_request(buf + pos, n);
        if (request == NULL) {
            if (PyErr_Occurred())
                goto error;
            PyObject *line = PyBytes_FromStringAndSize(buf + pos, n);
            if (line == NULL)
                goto error;
            request = PyObject_CallOneArg(parse, line);
            Py_DECREF(line);
            if (request == NULL)
                goto error;
            if (request == BulkHeader) {
                Py_DECREF(request);
                at_header = 1;
                break;
            }
        }
        int rc = PyList_Append(out, request);
        Py_DECREF(request);
        if (rc < 0)
            goto error;
        pos += n + 1;
    }
    return Py_BuildValue("(NnO)", out, pos, at_header ? Py_True : Py_False);

error:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
plain_rows(PyObject *module, PyObject *body)
{
    if (!PyBytes_CheckExact(body)) {
        PyErr_SetString(PyExc_TypeError, "plain_rows(bytes)");
        return NULL;
    }
    if (SetType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "plain_rows() before bind()");
        return NULL;
    }
    const char *buf = PyBytes_AS_STRING(body);
    Py_ssize_t size = PyBytes_GET_SIZE(body), pos = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    while (pos < size) {
        const char *lf = memchr(buf + pos, '\n', size - pos);
        if (lf == NULL)
            break; /* a last row without its LF is no row of a frame */
        Py_ssize_t n = lf - (buf + pos);
        PyObject *row = plain_request(buf + pos, n);
        if (row == NULL || Py_TYPE(row) != (PyTypeObject *)SetType) {
            Py_XDECREF(row);
            Py_DECREF(out);
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE;
        }
        int rc = PyList_Append(out, row);
        Py_DECREF(row);
        if (rc < 0) {
            Py_DECREF(out);
            return NULL;
        }
        pos += n + 1;
    }
    if (pos < size) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "bind(Get, Set, Delete, bulk_header, max_name, max_value)");
        return NULL;
    }
    for (int i = 0; i < 3; i++) {
        if (!PyType_Check(args[i]) || !PyType_IsSubtype((PyTypeObject *)args[i], &PyTuple_Type)) {
            PyErr_SetString(PyExc_TypeError, "bind() takes three named tuple types first");
            return NULL;
        }
    }
    Py_ssize_t names = PyLong_AsSsize_t(args[4]), values = PyLong_AsSsize_t(args[5]);
    if (PyErr_Occurred())
        return NULL;
    PyObject **slots[4] = {&GetType, &SetType, &DeleteType, &BulkHeader};
    for (int i = 0; i < 4; i++) {
        Py_INCREF(args[i]);
        Py_XSETREF(*slots[i], args[i]);
    }
    max_name = names;
    max_value = values;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_lines", (PyCFunction)(void (*)(void))decode_lines, METH_FASTCALL,
     "decode_lines(buffer, want, parse) -> (requests, used, at_header)"},
    {"plain_rows", (PyCFunction)plain_rows, METH_O,
     "plain_rows(body) -> the rows of a frame of plain SETs, or None"},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(Get, Set, Delete, bulk_header, max_name, max_value): what the decoder makes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_cline", "The line decoder's common lines in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__cline(void)
{
    const char *chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:/-";
    for (const char *c = chars; *c; c++)
        name_char[(unsigned char)*c] = 1;
    return PyModule_Create(&module_def);
}
