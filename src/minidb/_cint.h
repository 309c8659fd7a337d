/* Shared by the C accelerators that keep counters as Python ints (protocol/_cresp.c: the
 * decoder's bytes and commands; server/resp/_cconnection.c: a connection's and the owner's
 * counts; store/_cplain.c: the command counts): ``counter + by`` as Python adds them, without
 * the number protocol or a second int for the common case. */
#ifndef MINIDB_CINT_H
#define MINIDB_CINT_H

#include <Python.h>
#include <limits.h>

/* ``counter + by`` (a new reference, or NULL with Python's error): an exact int in range and
 * ``by`` >= 0 added in C, anything else by ``+`` (past a machine word, a subclass). */
static inline PyObject *
int_plus(PyObject *counter, long long by)
{
    if (PyLong_CheckExact(counter) && by >= 0) {
        int overflow;
        long long value = PyLong_AsLongLongAndOverflow(counter, &overflow);
        if (!overflow && value <= LLONG_MAX - by) {
            return PyLong_FromLongLong(value + by);
        }
    }
    PyObject *by_obj = PyLong_FromLongLong(by);
    PyObject *sum = by_obj == NULL ? NULL : PyNumber_Add(counter, by_obj);
    Py_XDECREF(by_obj);
    return sum;
}

#endif
