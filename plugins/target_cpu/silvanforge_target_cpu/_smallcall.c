/* The foreign call of small requests (see small.py): a CPython function of four arguments that
 * stages the rows, runs a compiled small-call entry and copies its results out.
 *
 * Why C: a ctypes call costs about 0.45 us and numpy's staging and copies another 0.5 us,
 * twice what a 1-row walk of a 100-tree model costs; this call costs about 0.1 us.  It holds
 * no state of its own: everything is in the caller's staging, described by a bytes object.
 *
 *   run(state, rows, out, mode) -> int
 *
 * state: struct State below, packed by small.py (native int64 words).
 * rows:  C-contiguous rows of the kernel's input dtype (n x features); or a list of n tuples
 *        of features Python numbers (float, int; None: missing), a frame's rows as its library
 *        hands them out (polars' row tuples), converted as NumPy converts them (through
 *        float64) straight into the staging; anything else (another layout, too many rows, a
 *        value of another type, an input dtype not float32 or float64) returns -1 and the
 *        caller stages it in Python, or reads the frame otherwise.
 * out:   a writable C-contiguous buffer of n x outputs values of the output dtype.
 * mode:  0 margins into out; 1 the entry's transform into out (the margins where the entry
 *        returns 0: a float32 softmax it cannot do exactly); 2 float64 sigmoid or exp: where
 *        the entry finds every margin safe for exp (small.GUARD), exp's argument into out (the
 *        margins times -alpha for sigmoid, the margins for exp), then, where the state holds
 *        NumPy's own float64 exp loop (small.numpy_exp_loop), the whole transform through it;
 *        else the margins.
 * Returns the entry's result (mode 0: 1; mode 1: 1 transformed, 0 margins; mode 2: 0 margins,
 * 1 exp's arguments, 2 the transformed values), or -1 when the rows are not taken.
 *
 *   sigmoid_tail(out) -> None: out = 1 / (1 + out), float64, in place: the reference's last two
 *   operations (IEEE, as NumPy's add and divide round them).
 *
 *   unary_float64_loop(ufunc) -> (function, data): the inner loop a one-input, one-output NumPy
 *   ufunc has for float64 -> float64 (the first such in its type list, what NumPy's type
 *   resolution picks), as addresses, or (0, 0) where it has none.  Read through NumPy's public
 *   C API (numpy/ufuncobject.h: PyUFuncObject's nin, nout, nargs, ntypes, types, functions,
 *   data), never at offsets of our own; small.py probes the loop against the ufunc before use.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/ndarraytypes.h>
#include <numpy/ufuncobject.h>

typedef int64_t (*entry_fn)(int64_t *block, int64_t n, int64_t apply);

typedef struct {
    int64_t entry;          /* address of the compiled entry */
    int64_t block;          /* the thread's block of words (small.py: INS, OUT, ...) */
    int64_t ins;            /* staging rows, room for max_rows and the lanes past them */
    int64_t margins;        /* staging margins (the block's OUT) */
    int64_t final;          /* staging transformed values (the block's FINAL) */
    int64_t row_bytes;      /* bytes of one input row */
    int64_t out_row_bytes;  /* bytes of one row of outputs */
    int64_t max_rows;
    int64_t tail;           /* mode 2: 1 exp, 2 sigmoid */
    int64_t exp_loop;       /* mode 2: NumPy's float64 exp inner loop, or 0 */
    int64_t exp_data;       /* ... and its data argument */
    int64_t features;       /* values in one input row */
    int64_t in_item;        /* bytes of one input value: 4 float32, 8 float64, 0 another dtype */
    double neg_alpha;       /* mode 2, sigmoid: -alpha */
} State;

/* NumPy's inner-loop signature (PyUFuncGenericFunction). */
typedef void (*ufunc_loop)(char **args, const Py_ssize_t *dimensions, const Py_ssize_t *steps,
                           void *data);

/* A list of row tuples of Python numbers written to the staging: the rows' count, or -1 where
 * one is not taken (nothing is raised).  Why: a polars frame hands a few rows out as tuples in
 * under a microsecond, and NumPy's array of them and its conversion to float32 cost 1.2 us
 * more, half a one-row call.  A value converts as NumPy converts it into a float64 array (a
 * float as it is, an int correctly rounded, None NaN), then to float32 where the kernel reads
 * float32; a bool, or any other type, is left to the caller's readers. */
static int64_t stage_tuples(const State *st, PyObject *list)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (n < 1 || n > st->max_rows || (st->in_item != 4 && st->in_item != 8) || st->features < 1)
        return -1;
    char *ins = (char *)(intptr_t)st->ins;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(list, i);
        if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != st->features)
            return -1;
        char *at = ins + i * st->row_bytes;
        for (Py_ssize_t j = 0; j < st->features; j++) {
            PyObject *o = PyTuple_GET_ITEM(row, j);
            double v;
            if (PyFloat_CheckExact(o)) {
                v = PyFloat_AS_DOUBLE(o);
            } else if (o == Py_None) {
                v = Py_NAN;
            } else if (PyLong_CheckExact(o)) {  /* (exact: a bool is left to the readers) */
                v = PyLong_AsDouble(o);
                if (v == -1.0 && PyErr_Occurred()) {  /* beyond float64: the readers' error */
                    PyErr_Clear();
                    return -1;
                }
            } else {
                return -1;
            }
            if (st->in_item == 4)
                ((float *)at)[j] = (float)v;
            else
                ((double *)at)[j] = v;
        }
    }
    return (int64_t)n;
}

static PyObject *run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "run(state, rows, out, mode) takes 4 arguments");
        return NULL;
    }
    if (!PyBytes_Check(args[0]) || PyBytes_GET_SIZE(args[0]) != (Py_ssize_t)sizeof(State)) {
        PyErr_SetString(PyExc_TypeError, "run: state must be the bytes of a State");
        return NULL;
    }
    const State *st = (const State *)PyBytes_AS_STRING(args[0]);
    long mode = PyLong_AsLong(args[3]);
    if (mode == -1 && PyErr_Occurred())
        return NULL;
    if (mode < 0 || mode > 2) {
        PyErr_SetString(PyExc_ValueError, "run: mode must be 0, 1 or 2");
        return NULL;
    }

    int64_t n;
    if (PyList_CheckExact(args[1])) {
        n = stage_tuples(st, args[1]);
        if (n < 0)
            return PyLong_FromLong(-1);
    } else {
        Py_buffer rows;
        if (PyObject_GetBuffer(args[1], &rows, PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Clear();  /* not C-contiguous (or no buffer): the caller's general staging */
            return PyLong_FromLong(-1);
        }
        n = st->row_bytes > 0 ? (int64_t)rows.len / st->row_bytes : 0;
        if (n < 1 || n > st->max_rows || n * st->row_bytes != (int64_t)rows.len) {
            PyBuffer_Release(&rows);
            return PyLong_FromLong(-1);
        }
        memcpy((void *)(intptr_t)st->ins, rows.buf, (size_t)rows.len);
        PyBuffer_Release(&rows);
    }

    Py_buffer out;
    if (PyObject_GetBuffer(args[2], &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if ((int64_t)out.len != n * st->out_row_bytes) {
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "run: out does not hold one row of outputs per row");
        return NULL;
    }
    entry_fn entry = (entry_fn)(intptr_t)st->entry;
    int64_t *block = (int64_t *)(intptr_t)st->block;
    int64_t result;
    /* Without the GIL, so other Python threads run meanwhile, as ctypes calls let them (it
     * costs a 1-row call 0.05 us). */
    Py_BEGIN_ALLOW_THREADS
    result = entry(block, n, mode != 0);
    Py_END_ALLOW_THREADS
    if (mode == 2 && result) {
        const double *m = (const double *)(intptr_t)st->margins;
        double *x = (double *)out.buf;
        Py_ssize_t count = out.len / (Py_ssize_t)sizeof(double);
        for (Py_ssize_t k = 0; k < count; k++)
            x[k] = st->tail == 2 ? st->neg_alpha * m[k] : m[k];
        if (st->exp_loop) {  /* exp in place, as np.exp(x, x) runs it; then 1 / (1 + e) */
            char *args[2] = {(char *)x, (char *)x};
            Py_ssize_t steps[2] = {sizeof(double), sizeof(double)};
            ((ufunc_loop)(intptr_t)st->exp_loop)(args, &count, steps, (void *)(intptr_t)st->exp_data);
            if (st->tail == 2)
                for (Py_ssize_t k = 0; k < count; k++)
                    x[k] = 1.0 / (1.0 + x[k]);
            result = 2;
        }
    } else {
        const void *from = (const void *)(intptr_t)(mode == 1 && result ? st->final : st->margins);
        memcpy(out.buf, from, (size_t)out.len);
    }
    PyBuffer_Release(&out);
    return PyLong_FromLongLong(result);
}

static PyObject *sigmoid_tail(PyObject *self, PyObject *arg)
{
    Py_buffer out;
    if (PyObject_GetBuffer(arg, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (out.itemsize != sizeof(double) || out.format == NULL || strcmp(out.format, "d") != 0) {
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_TypeError, "sigmoid_tail: out must hold float64 values");
        return NULL;
    }
    double *x = (double *)out.buf;
    for (Py_ssize_t k = 0; k < out.len / (Py_ssize_t)sizeof(double); k++)
        x[k] = 1.0 / (1.0 + x[k]);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

static PyObject *unary_float64_loop(PyObject *self, PyObject *arg)
{
    /* NumPy's ufunc API table (PyUFunc_Type), imported on first use: importing the module needs
     * no NumPy, only this call does, and it is made where NumPy is already imported. */
    if (PyUFunc_API == NULL && _import_umath() < 0)
        return NULL;
    if (!PyObject_TypeCheck(arg, &PyUFunc_Type)) {
        PyErr_SetString(PyExc_TypeError, "unary_float64_loop: expected a numpy ufunc");
        return NULL;
    }
    const PyUFuncObject *ufunc = (const PyUFuncObject *)arg;
    if (ufunc->nin == 1 && ufunc->nout == 1 && ufunc->nargs == 2 && ufunc->types != NULL &&
            ufunc->functions != NULL) {
        for (int k = 0; k < ufunc->ntypes; k++) {
            const char *types = ufunc->types + (size_t)k * (size_t)ufunc->nargs;
            if (types[0] == NPY_DOUBLE && types[1] == NPY_DOUBLE && ufunc->functions[k] != NULL) {
                void *data = ufunc->data != NULL ? ufunc->data[k] : NULL;
                return Py_BuildValue("(KK)", (unsigned long long)(uintptr_t)ufunc->functions[k],
                                     (unsigned long long)(uintptr_t)data);
            }
        }
    }
    return Py_BuildValue("(ii)", 0, 0);
}

static PyMethodDef methods[] = {
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL,
     "run(state, rows, out, mode) -> int: one small call (see the module's source)."},
    {"sigmoid_tail", sigmoid_tail, METH_O, "sigmoid_tail(out): out = 1 / (1 + out), float64, in place."},
    {"unary_float64_loop", unary_float64_loop, METH_O,
     "unary_float64_loop(ufunc) -> (function, data): its float64 inner loop's addresses, or (0, 0)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_smallcall", "The foreign call of small requests.", -1, methods,
};

PyMODINIT_FUNC PyInit__smallcall(void)
{
    return PyModule_Create(&module);
}
