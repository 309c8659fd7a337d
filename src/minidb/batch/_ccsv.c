/* minidb.batch._ccsv: the import reader's common row in C (optional accelerator).
 *
 * One function, the C twin of the first branch of ``ImportReader._fast_rows`` (theory of
 * operation: the docstring of ``_csv_import.py``):
 *
 * ``good_rows(data, pos, line, out, row_type, max_value, max_name) -> (next pos, rows)``
 * takes, from offset ``pos``, every whole line that ``_GOOD_ROW`` matches and whose value is
 * at most ``max_value`` bytes of ASCII, and appends ``row_type(line, bucket, key, value)`` for
 * each to ``out`` (``line`` counting up by one a row). It stops at the first line that is not
 * such a row, or is not complete, and returns where it stopped and how many rows it took.
 *
 * ``_GOOD_ROW`` is: a bucket and a key of 1 to ``max_name`` bytes of ``[A-Za-z0-9_.:/-]``,
 * each followed by a comma; then a value, plain (no comma, quote, CR, LF or NUL) or quoted
 * (a quote, any bytes but quote, CR, LF and NUL with a quote written twice, a quote); then LF
 * or CRLF. The scan below is that pattern, deterministically: the pattern never needs to
 * backtrack (after a closing quote only CR or LF may follow, so a doubled quote is always
 * data).
 *
 * Anything else stops the scan and is left to the Python code, which is the reference: the
 * scan never decides an error, so the two cannot disagree on one. Property tests run the
 * reader both ways (``MINIDB_PURE_PYTHON=1``).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static unsigned char name_byte[256];

static void
init_tables(void)
{
    const char *extra = "_.:/-";
    for (int c = '0'; c <= '9'; c++)
        name_byte[c] = 1;
    for (int c = 'A'; c <= 'Z'; c++)
        name_byte[c] = 1;
    for (int c = 'a'; c <= 'z'; c++)
        name_byte[c] = 1;
    for (const char *p = extra; *p; p++)
        name_byte[(unsigned char)*p] = 1;
}

/* A name ending in a comma at ``s[*at]``; advances past the comma. */
static int
take_name(const unsigned char *s, Py_ssize_t n, Py_ssize_t *at, Py_ssize_t max_name,
          Py_ssize_t *start, Py_ssize_t *len)
{
    Py_ssize_t i = *at;
    *start = i;
    while (i < n && name_byte[s[i]])
        i++;
    *len = i - *start;
    if (*len < 1 || *len > max_name || i >= n || s[i] != ',')
        return 0;
    *at = i + 1;
    return 1;
}

/* The end of the line: LF, or CRLF, at ``s[*at]``; advances past it. */
static int
take_eol(const unsigned char *s, Py_ssize_t n, Py_ssize_t *at)
{
    Py_ssize_t i = *at;
    if (i < n && s[i] == '\r')
        i++;
    if (i >= n || s[i] != '\n')
        return 0;
    *at = i + 1;
    return 1;
}

static PyObject *
new_row(PyTypeObject *row_type, Py_ssize_t line, const unsigned char *s, Py_ssize_t b0,
        Py_ssize_t bl, Py_ssize_t k0, Py_ssize_t kl, PyObject *value)
{
    PyObject *row = row_type->tp_alloc(row_type, 4);
    if (row == NULL)
        return NULL;
    PyObject *num = PyLong_FromSsize_t(line);
    PyObject *bucket = PyBytes_FromStringAndSize((const char *)s + b0, bl);
    PyObject *key = PyBytes_FromStringAndSize((const char *)s + k0, kl);
    if (num == NULL || bucket == NULL || key == NULL) {
        Py_XDECREF(num);
        Py_XDECREF(bucket);
        Py_XDECREF(key);
        Py_DECREF(row);
        return NULL;
    }
    PyTuple_SET_ITEM(row, 0, num);
    PyTuple_SET_ITEM(row, 1, bucket);
    PyTuple_SET_ITEM(row, 2, key);
    Py_INCREF(value);
    PyTuple_SET_ITEM(row, 3, value);
    return row;
}

static PyObject *
good_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7 || !PyBytes_CheckExact(args[0]) || !PyList_CheckExact(args[3]) ||
        !PyType_Check(args[4]) ||
        !PyType_IsSubtype((PyTypeObject *)args[4], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "good_rows(data: bytes, pos, line, out: list, row_type: tuple type, "
                        "max_value, max_name)");
        return NULL;
    }
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t line = PyLong_AsSsize_t(args[2]);
    Py_ssize_t max_value = PyLong_AsSsize_t(args[5]);
    Py_ssize_t max_name = PyLong_AsSsize_t(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "good_rows: pos out of range");
        return NULL;
    }
    PyObject *out = args[3];
    PyTypeObject *row_type = (PyTypeObject *)args[4];
    Py_ssize_t taken = 0;

    while (pos < n) {
        Py_ssize_t at = pos, b0, bl, k0, kl;
        if (!take_name(s, n, &at, max_name, &b0, &bl) ||
            !take_name(s, n, &at, max_name, &k0, &kl))
            break;
        PyObject *value;
        if (at < n && s[at] == '"') {
            /* Quoted: the body, its doubled quotes counted, then the closing quote. */
            Py_ssize_t body = ++at, doubled = 0;
            int closed = 0, ascii = 1;
            while (at < n) {
                unsigned char c = s[at];
                if (c == '"') {
                    if (at + 1 < n && s[at + 1] == '"') {
                        doubled++;
                        at += 2;
                        continue;
                    }
                    closed = 1;
                    break;
                }
                if (c == '\r' || c == '\n' || c == 0)
                    break;
                ascii &= c < 0x80;
                at++;
            }
            Py_ssize_t end = at;
            if (!closed)
                break;
            at++; /* the closing quote */
            Py_ssize_t size = end - body - doubled;
            if (!ascii || size > max_value || !take_eol(s, n, &at))
                break;
            if (doubled == 0) {
                value = PyBytes_FromStringAndSize((const char *)s + body, size);
            }
            else {
                value = PyBytes_FromStringAndSize(NULL, size);
                if (value != NULL) {
                    char *w = PyBytes_AS_STRING(value);
                    for (Py_ssize_t r = body; r < end; r++) {
                        *w++ = (char)s[r];
                        if (s[r] == '"')
                            r++; /* the second quote of a pair */
                    }
                }
            }
        }
        else {
            Py_ssize_t v0 = at;
            int ascii = 1;
            while (at < n) {
                unsigned char c = s[at];
                if (c == ',' || c == '"' || c == '\r' || c == '\n' || c == 0)
                    break;
                ascii &= c < 0x80;
                at++;
            }
            Py_ssize_t size = at - v0;
            if (!ascii || size > max_value || !take_eol(s, n, &at))
                break;
            value = PyBytes_FromStringAndSize((const char *)s + v0, size);
        }
        if (value == NULL)
            return NULL;
        PyObject *row = new_row(row_type, line, s, b0, bl, k0, kl, value);
        Py_DECREF(value);
        if (row == NULL)
            return NULL;
        int failed = PyList_Append(out, row);
        Py_DECREF(row);
        if (failed)
            return NULL;
        taken++;
        line++;
        pos = at;
    }
    return Py_BuildValue("(nn)", pos, taken);
}

static PyMethodDef ccsv_methods[] = {
    {"good_rows", (PyCFunction)(void (*)(void))good_rows, METH_FASTCALL,
     "good_rows(data, pos, line, out, row_type, max_value, max_name) -> (next pos, rows)\n\n"
     "Append to out every whole line from data[pos:] that is a common good import row."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef ccsv_module = {
    PyModuleDef_HEAD_INIT,
    "minidb.batch._ccsv",
    "The import reader's common row in C (see _ccsv.c).",
    -1,
    ccsv_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__ccsv(void)
{
    init_tables();
    return PyModule_Create(&ccsv_module);
}
