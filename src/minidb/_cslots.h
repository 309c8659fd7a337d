/* Shared by the C accelerators that read or fill the __slots__ of a Python class directly
 * (runtime/_cwheel.c: a timer handle's fields; protocol/_cresp.c: the RESP decoder's state;
 * runtime/_cio.c: the socket transport's; server/resp/_cconnection.c: a connection's;
 * store/_cplain.c: the keyspace's and the journal's, through ``SlotAttr``):
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
static inline Py_ssize_t
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
static inline int
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

/* An attribute that C reads or sets often, by name (``name``, interned), at its slot's offset
 * in instances of the class it was last resolved for; anything else (another class, a class
 * changed since, a name that is no plain slot there, an unset slot) the ordinary way. The
 * class is not held: its version tag, which CPython never gives two classes and clears when a
 * class changes, says whether the offset still holds. */
typedef struct {
    PyObject *name;
    PyTypeObject *type;
    unsigned int version;
    Py_ssize_t offset;
} SlotAttr;

static inline Py_ssize_t
slot_attr_offset(SlotAttr *attr, PyTypeObject *tp)
{
    if (tp != attr->type || tp->tp_version_tag != attr->version || attr->version == 0) {
        attr->offset = member_offset(tp, attr->name);  /* (the lookup assigns the tag) */
        attr->type = tp;
        attr->version = tp->tp_version_tag;
    }
    return attr->offset;
}

/* ``obj.<name>``: a new reference, or NULL with Python's error. */
static inline PyObject *
slot_attr_get(SlotAttr *attr, PyObject *obj)
{
    Py_ssize_t offset = slot_attr_offset(attr, Py_TYPE(obj));
    if (offset >= 0) {
        PyObject *value = *(PyObject **)((char *)obj + offset);
        if (value != NULL) {
            return Py_NewRef(value);
        }
    }
    return PyObject_GetAttr(obj, attr->name);
}

/* ``obj.<name> = value`` (``value`` borrowed), as the slot's descriptor sets it; -1 on error. */
static inline int
slot_attr_set(SlotAttr *attr, PyObject *obj, PyObject *value)
{
    Py_ssize_t offset = slot_attr_offset(attr, Py_TYPE(obj));
    if (offset >= 0) {
        Py_XSETREF(*(PyObject **)((char *)obj + offset), Py_NewRef(value));
        return 0;
    }
    return PyObject_SetAttr(obj, attr->name, value);
}

#endif
