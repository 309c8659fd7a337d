/* Shared by the C accelerators that read or fill the __slots__ of a Python class directly
 * (runtime/_cwheel.c: a timer handle's fields; protocol/_cresp.c: the RESP decoder's state;
 * runtime/_cio.c: the socket transport's):
 * where such a slot lives in an instance, so that C reads it at that offset, with no
 * attribute lookup, as CPython's own member descriptor does. */
#ifndef MINIDB_CSLOTS_H
#define MINIDB_CSLOTS_H

#include <Python.h>

#if PY_VERSION_HEX < 0x030C0000
#include <structmember.h>
#define MEMBER_OBJECT_EX T_OBJECT_EX
#define MEMBER_READONLY READONLY
#else
#define MEMBER_OBJECT_EX Py_T_OBJECT_EX
#define MEMBER_READONLY Py_READONLY
#endif

/* The offset of a writable object slot ``name`` in instances of ``tp``, or -1 when ``name``
 * is not a plain __slots__ member there (then ordinary attribute access is the way). */
static Py_ssize_t
member_offset(PyTypeObject *tp, PyObject *name)
{
    PyObject *d = _PyType_Lookup(tp, name);
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        return -1;
    }
    PyMemberDef *def = ((PyMemberDescrObject *)d)->d_member;
    if (def->type != MEMBER_OBJECT_EX || (def->flags & MEMBER_READONLY)) {
        return -1;
    }
    if (!PyType_IsSubtype(tp, PyDescr_TYPE(d))) {
        return -1;
    }
    if (def->offset < (Py_ssize_t)sizeof(PyObject)
        || def->offset + (Py_ssize_t)sizeof(PyObject *) > tp->tp_basicsize) {
        return -1;
    }
    return def->offset;
}

/* ``member_offset`` of each of the ``n`` names into ``offsets``: ``n`` when every one is a
 * plain slot, else the index of the first that is not (``offsets`` then partly filled), or
 * -1 with an exception set (a name could not be made). */
static int
member_offsets(PyTypeObject *tp, const char *const *names, int n, Py_ssize_t *offsets)
{
    for (int i = 0; i < n; i++) {
        PyObject *name = PyUnicode_InternFromString(names[i]);
        if (name == NULL) {
            return -1;
        }
        offsets[i] = member_offset(tp, name);
        Py_DECREF(name);
        if (offsets[i] < 0) {
            return i;
        }
    }
    return n;
}

#endif
