/*
 * decoder._tuplewalk: the compiled form of the decoder's TupleData walk.
 *
 * Theory of operation
 * -------------------
 * Every row message of a stream is walked three times: validated when it arrives
 * (parser.row_message_is_valid), its tuples skipped when it is read back (parser.row_parts),
 * and its values converted by the sink's planner (values.load_tuple_wire, through
 * tupledata.walk_tuple). On CPython the loop over the columns was a fifth of the capture
 * path's CPU and a quarter of the planner's. This module runs that one loop (walk_part) in
 * C: without a list it only finds where the part ends; with one it appends each column's
 * value - its loader's result (the loaders stay Python callables, psycopg's), or the NULL or
 * unchanged-TOAST marker it is given.
 *
 * The Python functions stay the reference (decoder/native.py picks one of the two forms at
 * import): both answer the same for every input (tests/unit/decoder/test_native.py compares
 * them on golden messages and on hypothesis-generated and damaged ones). Any failure here -
 * a part that does not fit, a loader that is missing or raises, an argument of another type
 * than the fast path takes - answers -1, None or False and never an error text: the caller
 * then runs the Python reference, which finds the same verdict and words the error with its
 * offset and message type.
 *
 * Wire format (logicalrep_write_tuple): Int16 column count, then per column a status byte:
 * 'n' NULL, 'u' unchanged TOAST (nothing follows), 't' text or 'b' binary followed by an
 * Int32 length and that many bytes. All integers big-endian.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static Py_ssize_t tuple_end_at(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos);

/* The same verdict as parser.row_message_is_valid (see there). */
static int
row_message_valid(const unsigned char *buf, Py_ssize_t len, int in_stream)
{
    Py_ssize_t pos = 5;
    if (len < 1) {
        return 0;
    }
    if (in_stream) {
        if (len < 5 || !(buf[1] | buf[2] | buf[3] | buf[4])) {
            return 0; /* xid 0: scan_row_message reports it */
        }
        pos = 9;
    }
    if (pos >= len) {
        return 0;
    }
    unsigned char tag = buf[0];
    unsigned char marker = buf[pos];
    if (tag == 'I') {
        if (marker != 'N') {
            return 0;
        }
    }
    else if (tag == 'U') {
        if (marker == 'K' || marker == 'O') {
            pos = tuple_end_at(buf, len, pos + 1);
            if (pos < 0 || pos >= len || buf[pos] != 'N') {
                return 0;
            }
        }
        else if (marker != 'N') {
            return 0;
        }
    }
    else if (tag == 'D') {
        if (marker != 'K' && marker != 'O') {
            return 0;
        }
    }
    else {
        return 0;
    }
    return tuple_end_at(buf, len, pos + 1) == len;
}

/* Borrow the bytes of ``obj``: bytes directly, anything else through the buffer protocol. */
static int
borrow(PyObject *obj, Py_buffer *view, const unsigned char **data, Py_ssize_t *len)
{
    if (PyBytes_CheckExact(obj)) {
        view->obj = NULL;
        *data = (const unsigned char *)PyBytes_AS_STRING(obj);
        *len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) {
        return -1;
    }
    *data = (const unsigned char *)view->buf;
    *len = view->len;
    return 0;
}

static void
release(Py_buffer *view)
{
    if (view->obj != NULL) {
        PyBuffer_Release(view);
    }
}

/* Item ``index`` of the loader sequence ``seq``, a new reference (a loader may change the
 * list it came from while it runs); NULL without an exception set when there is none. */
static PyObject *
loader_at(PyObject *seq, Py_ssize_t index)
{
    PyObject *item = NULL;
    if (PyList_CheckExact(seq)) {
        item = index < PyList_GET_SIZE(seq) ? PyList_GET_ITEM(seq, index) : NULL;
        Py_XINCREF(item);
        return item;
    }
    if (PyTuple_CheckExact(seq)) {
        item = index < PyTuple_GET_SIZE(seq) ? PyTuple_GET_ITEM(seq, index) : NULL;
        Py_XINCREF(item);
        return item;
    }
    item = PySequence_GetItem(seq, index);
    if (item == NULL) {
        PyErr_Clear();
    }
    return item;
}

/* One column's value: its loader called on a copy of its bytes. NULL (no exception set)
 * when the loader is missing or raised: the Python walk then does the column again. */
static PyObject *
load_value(PyObject *loaders, Py_ssize_t index, const unsigned char *data, Py_ssize_t size)
{
    PyObject *loader = loader_at(loaders, index);
    if (loader == NULL) {
        return NULL;
    }
    PyObject *value = NULL;
    PyObject *raw = PyBytes_FromStringAndSize((const char *)data, size);
    if (raw != NULL) {
        value = PyObject_CallOneArg(loader, raw);
        Py_DECREF(raw);
    }
    Py_DECREF(loader);
    if (value == NULL) {
        PyErr_Clear();
    }
    return value;
}

/* The one loop over a TupleData part's columns (tupledata.walk_tuple_reference's): the
 * offset after the part at buf[pos:], or -1 when it does not fit buf. With ``out`` (a list)
 * each column's value is appended - a loader's result, ``null`` or ``unchanged`` - and -1
 * also means a loader is missing or raised; without it (NULL) the walk only validates. */
static Py_ssize_t
walk_part(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos, PyObject *out,
          PyObject *text, PyObject *binary, PyObject *null, PyObject *unchanged)
{
    if (pos < 0 || pos > len - 2) {
        return -1;
    }
    unsigned int count = ((unsigned int)buf[pos] << 8) | buf[pos + 1];
    pos += 2;
    for (unsigned int i = 0; i < count; i++) {
        if (pos >= len) {
            return -1;
        }
        unsigned char kind = buf[pos];
        PyObject *value = NULL;
        if (kind == 't' || kind == 'b') {
            if (pos > len - 5) {
                return -1;
            }
            uint32_t size = ((uint32_t)buf[pos + 1] << 24) | ((uint32_t)buf[pos + 2] << 16)
                            | ((uint32_t)buf[pos + 3] << 8) | (uint32_t)buf[pos + 4];
            if ((uint64_t)size > (uint64_t)(len - pos - 5)) {
                return -1;
            }
            if (out != NULL) {
                value = load_value(kind == 't' ? text : binary, (Py_ssize_t)i, buf + pos + 5,
                                   (Py_ssize_t)size);
                if (value == NULL) {
                    return -1;
                }
            }
            pos += 5 + (Py_ssize_t)size;
        }
        else if (kind == 'n' || kind == 'u') {
            if (out != NULL) {
                value = kind == 'n' ? null : unchanged;
                Py_INCREF(value);
            }
            pos += 1;
        }
        else {
            return -1;
        }
        if (out != NULL) {
            int appended = PyList_Append(out, value);
            Py_DECREF(value);
            if (appended < 0) {
                PyErr_Clear();
                return -1;
            }
        }
    }
    return pos;
}

static Py_ssize_t
tuple_end_at(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos)
{
    return walk_part(buf, len, pos, NULL, NULL, NULL, NULL, NULL);
}

/* The checks walk and load start with: ``nargs`` is
 * ``expected``, args[1] is the start offset. 0, or -1 with an exception set. */
static int
start_argument(const char *name, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected,
               Py_ssize_t *start)
{
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s takes exactly %zd arguments", name, expected);
        return -1;
    }
    *start = PyLong_AsSsize_t(args[1]);
    return (*start == -1 && PyErr_Occurred()) ? -1 : 0;
}

PyDoc_STRVAR(walk_doc,
"walk(buf, start, out, text, binary, null, unchanged, /)\n--\n\n"
"tupledata.walk_tuple for a bytes buf and a list out (None only validates): the offset\n"
"after the TupleData part, or -1 when the part does not fit buf, a loader is missing or\n"
"raised, or buf is not bytes. On -1 out may hold some of the values and no exception is\n"
"set: the caller drops them and runs the Python walk, which raises the precise error.");

static PyObject *
walk(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start;
    if (start_argument("walk", args, nargs, 7, &start) < 0) {
        return NULL;
    }
    PyObject *buf = args[0];
    PyObject *out = args[2];
    if (!PyBytes_CheckExact(buf) || (out != Py_None && !PyList_CheckExact(out))) {
        return PyLong_FromSsize_t(-1);
    }
    return PyLong_FromSsize_t(walk_part((const unsigned char *)PyBytes_AS_STRING(buf),
                                        PyBytes_GET_SIZE(buf), start,
                                        out == Py_None ? NULL : out, args[3], args[4], args[5],
                                        args[6]));
}

PyDoc_STRVAR(load_doc,
"load(buf, start, text, binary, null, unchanged, /)\n--\n\n"
"values.load_tuple_wire_reference in one call: a new list of the part's values, or None\n"
"when the column count is not len(text) or walk would answer -1 (the caller then runs the\n"
"reference, which raises the precise error).");

static PyObject *
load(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start;
    if (start_argument("load", args, nargs, 6, &start) < 0) {
        return NULL;
    }
    PyObject *buf = args[0];
    if (!PyBytes_CheckExact(buf)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t len = PyBytes_GET_SIZE(buf);
    Py_ssize_t loaders = PyObject_Length(args[2]);
    if (loaders < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(buf);
    if (start < 0 || start > len - 2
        || (Py_ssize_t)(((unsigned int)data[start] << 8) | data[start + 1]) != loaders) {
        Py_RETURN_NONE;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        return NULL;
    }
    if (walk_part(data, len, start, out, args[2], args[3], args[4], args[5]) < 0) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

PyDoc_STRVAR(row_message_is_valid_doc,
"row_message_is_valid(buf, in_stream, /)\n--\n\n"
"True when buf is an INSERT, UPDATE or DELETE that scan_row_message accepts; False means\n"
"\"not proven here\" (see decoder.parser.row_message_is_valid).");

static PyObject *
row_message_is_valid(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "row_message_is_valid takes exactly 2 arguments");
        return NULL;
    }
    int in_stream = PyObject_IsTrue(args[1]);
    if (in_stream < 0) {
        return NULL;
    }
    Py_buffer view;
    const unsigned char *data;
    Py_ssize_t len;
    if (borrow(args[0], &view, &data, &len) < 0) {
        return NULL;
    }
    int valid = row_message_valid(data, len, in_stream);
    release(&view);
    return PyBool_FromLong(valid);
}

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL, walk_doc},
    {"load", (PyCFunction)(void (*)(void))load, METH_FASTCALL, load_doc},
    {"row_message_is_valid", (PyCFunction)(void (*)(void))row_message_is_valid, METH_FASTCALL,
     row_message_is_valid_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "decoder._tuplewalk",
    "The decoder's validating TupleData walk, compiled (see decoder.kernel).",
    0,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__tuplewalk(void)
{
    return PyModuleDef_Init(&module_def);
}
