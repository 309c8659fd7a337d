/* Shared by the C accelerators that read or fill the __slots__ of a Python class directly
 * (runtime/_cwheel.c: a timer handle's fields; protocol/_cresp.c: the RESP decoder's state):
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

#endif
