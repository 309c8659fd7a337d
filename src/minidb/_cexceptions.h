/* Shared by the C accelerators that hand an exception to Python code, as an ``except ... as
 * exc`` clause would (runtime/_cio.c: a failed callback to the loop's handler;
 * server/resp/_cconnection.c: a failed connection method to ``_fail``). */
#ifndef MINIDB_CEXCEPTIONS_H
#define MINIDB_CEXCEPTIONS_H

#include <Python.h>

/* The exception being raised, taken (the error indicator cleared), with its traceback. */
static PyObject *
take_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    if (tb != NULL && exc != NULL) {
        PyException_SetTraceback(exc, tb);
    }
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return exc;
#endif
}

#endif
