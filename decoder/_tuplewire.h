/*
 * The TupleData wire helpers the decoder's kernel (decoder/_tuplewalk.c) and the sink's
 * columnar kernel (sink/planning/_columnar.c) share: borrowing bytes, calling loaders, the one walk
 * over a part's columns (walk_part, as tupledata.walk_tuple_reference), the text columns of a
 * part, the interned attribute names of RowChange and TupleData, and reading slots of the
 * decoder's slotted classes. Static: each extension compiles and initialises its own copy.
 * The wire format is described in decoder/_tuplewalk.c.
 */
#ifndef WAL2DELTA_TUPLEWIRE_H
#define WAL2DELTA_TUPLEWIRE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

/* Borrow the bytes of ``obj``: bytes directly, anything else through the buffer protocol. */
static inline int
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

static inline void
release(Py_buffer *view)
{
    if (view->obj != NULL) {
        PyBuffer_Release(view);
    }
}

/* Item ``index`` of the loader sequence ``seq``, a new reference (a loader may change the
 * list it came from while it runs); NULL without an exception set when there is none. */
static inline PyObject *
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
static inline PyObject *
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
static inline Py_ssize_t
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

static inline Py_ssize_t
tuple_end_at(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos)
{
    return walk_part(buf, len, pos, NULL, NULL, NULL, NULL, NULL);
}

/* Every entry point's first check: it was given ``expected`` arguments. 0, or -1 with a
 * TypeError set. */
static inline int
argument_count(const char *name, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "%s takes exactly %zd arguments", name, expected);
        return -1;
    }
    return 0;
}

/* The checks walk, load and pick start with: ``nargs`` is
 * ``expected``, args[1] is the start offset. 0, or -1 with an exception set. */
static inline int
start_argument(const char *name, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected,
               Py_ssize_t *start)
{
    if (argument_count(name, nargs, expected) < 0) {
        return -1;
    }
    *start = PyLong_AsSsize_t(args[1]);
    return (*start == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Offset and size of each of a part's ``count`` columns (size -1 for NULL), for a part
 * holding only text values and NULLs. The offset after the part, or -1 when the part does
 * not fit buf, its count is not ``count``, or a column is binary or unchanged TOAST. */
static inline Py_ssize_t
text_columns(const unsigned char *buf, Py_ssize_t len, Py_ssize_t pos, Py_ssize_t count,
             Py_ssize_t *offsets, Py_ssize_t *sizes)
{
    if (pos < 0 || pos > len - 2
        || (Py_ssize_t)(((unsigned int)buf[pos] << 8) | buf[pos + 1]) != count) {
        return -1;
    }
    pos += 2;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (pos >= len) {
            return -1;
        }
        if (buf[pos] == 'n') {
            sizes[i] = -1;
            pos += 1;
            continue;
        }
        if (buf[pos] != 't' || pos > len - 5) {
            return -1;
        }
        uint32_t size = ((uint32_t)buf[pos + 1] << 24) | ((uint32_t)buf[pos + 2] << 16)
                        | ((uint32_t)buf[pos + 3] << 8) | (uint32_t)buf[pos + 4];
        if ((uint64_t)size > (uint64_t)(len - pos - 5)) {
            return -1;
        }
        offsets[i] = pos + 5;
        sizes[i] = (Py_ssize_t)size;
        pos += 5 + (Py_ssize_t)size;
    }
    return pos;
}

/* A part as (bytes, start): 0 with the borrowed bytes, -1 (no exception) otherwise. */
static inline int
part_at(PyObject *part, const unsigned char **buf, Py_ssize_t *len, Py_ssize_t *start)
{
    if (!PyTuple_CheckExact(part) || PyTuple_GET_SIZE(part) != 2
        || !PyBytes_CheckExact(PyTuple_GET_ITEM(part, 0))
        || !PyLong_CheckExact(PyTuple_GET_ITEM(part, 1))) {
        return -1;
    }
    PyObject *bytes = PyTuple_GET_ITEM(part, 0);
    *start = PyLong_AsSsize_t(PyTuple_GET_ITEM(part, 1));
    if (*start == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *buf = (const unsigned char *)PyBytes_AS_STRING(bytes);
    *len = PyBytes_GET_SIZE(bytes);
    return 0;
}

/* Attribute names of RowChange and TupleData, interned once. */
static PyObject *name_relation, *name_old, *name_commit_time, *name_op, *name_new, *name_wire;
static PyObject *name_values, *name_buf, *name_start;
static PyObject *op_insert, *op_update, *op_delete, *old_kind_key, *old_kind_row;

static inline int
fold_names_ready(void)
{
    if (name_wire != NULL) {
        return 0;
    }
    name_relation = PyUnicode_InternFromString("relation");
    name_old = PyUnicode_InternFromString("old");
    name_commit_time = PyUnicode_InternFromString("commit_time");
    name_op = PyUnicode_InternFromString("op");
    name_new = PyUnicode_InternFromString("new");
    op_insert = PyUnicode_InternFromString("insert");
    op_update = PyUnicode_InternFromString("update");
    op_delete = PyUnicode_InternFromString("delete");
    old_kind_key = PyUnicode_InternFromString("K");
    old_kind_row = PyUnicode_InternFromString("O");
    name_values = PyUnicode_InternFromString("_values");
    name_buf = PyUnicode_InternFromString("_buf");
    name_start = PyUnicode_InternFromString("_start");
    name_wire = PyUnicode_InternFromString("wire");
    return (name_relation && name_old && name_commit_time && name_op && name_new && op_insert
            && op_update && op_delete && old_kind_key && old_kind_row && name_values && name_buf
            && name_start && name_wire)
               ? 0
               : -1;
}

/* How fold reads one attribute of a change: straight from its slot when the class
 * declares it in __slots__ (a member descriptor, as a frozen slots dataclass does), else
 * through getattr. */
typedef struct {
    PyObject *name;
    PyMemberDef *member;
} Field;

/* The slot definition behind ``descriptor`` (a class attribute), or NULL when it is not a
 * member descriptor (a ``__slots__`` entry). The class keeps both alive. */
static inline PyMemberDef *
slot_member(PyObject *descriptor)
{
    return Py_IS_TYPE(descriptor, &PyMemberDescr_Type)
               ? ((PyMemberDescrObject *)descriptor)->d_member
               : NULL;
}

static inline void
field_of(PyObject *type, PyObject *name, Field *field)
{
    field->name = name;
    field->member = NULL;
    PyObject *descriptor = PyObject_GetAttr(type, name);
    if (descriptor == NULL) {
        PyErr_Clear();
        return;
    }
    field->member = slot_member(descriptor);
    Py_DECREF(descriptor);
}

/* The attribute, a new reference; NULL with an exception set. */
static inline PyObject *
read_field(PyObject *obj, const Field *field)
{
    return field->member == NULL ? PyObject_GetAttr(obj, field->name)
                                 : PyMember_GetOne((const char *)obj, field->member);
}

/* The member definitions of ``names`` in ``type``; -1 with a TypeError when one is not a
 * slot (the caller's classes are frozen slots dataclasses). */
static inline int
members_of(PyObject *type, const char *const *names, int count, PyMemberDef **members)
{
    for (int i = 0; i < count; i++) {
        PyObject *descriptor = PyObject_GetAttrString(type, names[i]);
        if (descriptor == NULL) {
            return -1;
        }
        members[i] = slot_member(descriptor);
        Py_DECREF(descriptor);
        if (members[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%R.%s is not a slot", type, names[i]);
            return -1;
        }
    }
    return 0;
}

#endif /* WAL2DELTA_TUPLEWIRE_H */
