/*
 * sink._columnar: the compiled inner loops of the sink's columnar planner (sink/planning/fold.py,
 * sink/planning/columnar.py).
 *
 * pick converts only a row's identity columns, fold folds a run of plain inserts, updates
 * and deletes by that identity (the planner's inner loop: per change a few slot reads,
 * pick and two dict operations, no Python frame), gather lays the text values of many rows
 * out column by column in Arrow's binary layout, and columnar_meta lays out the rows'
 * commit LSNs, ordinals, commit times and delete flags as Arrow buffers. They have no
 * Python twin: without the kernel the planner converts rows one by one (its reference
 * path), and they answer None - or, for fold, stop at the change - for anything but text
 * values and NULLs, so the row path also raises every error
 * (tests/unit/sink/test_columnar.py compares both planners). The TupleData wire helpers
 * are the decoder's (decoder/_tuplewire.h).
 */
#include "_tuplewire.h"

PyDoc_STRVAR(pick_doc,
"pick(buf, start, indexes, text, /)\n--\n\n"
"The values of the columns at indexes (a tuple of ints), each through its text loader,\n"
"None for NULL, as a tuple - for a TupleData part of len(text) columns that holds only\n"
"text values and NULLs. None when it does not: a binary or unchanged-TOAST column, a\n"
"part that does not fit, another column count, a loader that is missing or raises\n"
"(the caller then takes the general path, which raises the precise error).");

/* The identity values pick answers, for a part of ``count`` columns at data[start:]:
 * a new tuple, or a new reference to None when pick answers None. NULL only with an
 * exception set (out of memory). ``offsets`` and ``sizes`` hold ``count`` entries each. */
static PyObject *
pick_values(const unsigned char *data, Py_ssize_t len, Py_ssize_t start, PyObject *indexes,
            PyObject *text, Py_ssize_t count, Py_ssize_t *offsets, Py_ssize_t *sizes)
{
    if (text_columns(data, len, start, count, offsets, sizes) < 0) {
        Py_RETURN_NONE;
    }
    Py_ssize_t wanted = PyTuple_GET_SIZE(indexes);
    PyObject *out = PyTuple_New(wanted);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < wanted; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(indexes, k));
        if (i < 0 || i >= count) {
            PyErr_Clear();
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        PyObject *value;
        if (sizes[i] < 0) {
            value = Py_None;
            Py_INCREF(value);
        }
        else {
            value = load_value(text, i, data + offsets[i], sizes[i]);
            if (value == NULL) {
                Py_DECREF(out);
                Py_RETURN_NONE;
            }
        }
        PyTuple_SET_ITEM(out, k, value);
    }
    return out;
}

static PyObject *
pick(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start;
    if (start_argument("pick", args, nargs, 4, &start) < 0) {
        return NULL;
    }
    PyObject *buf = args[0];
    PyObject *indexes = args[2];
    if (!PyBytes_CheckExact(buf) || !PyTuple_CheckExact(indexes)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t count = PyObject_Length(args[3]);
    if (count < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t *offsets = PyMem_New(Py_ssize_t, 2 * (size_t)(count + 1));
    if (offsets == NULL) {
        return PyErr_NoMemory();
    }
    PyObject *out = pick_values((const unsigned char *)PyBytes_AS_STRING(buf),
                                PyBytes_GET_SIZE(buf), start, indexes, args[3], count, offsets,
                                offsets + count + 1);
    PyMem_Free(offsets);
    return out;
}

PyDoc_STRVAR(fold_doc,
"fold(changes, start, row_type, tuple_type, relation, timestamp, indexes, text, plain,\n"
"     rows, folded, parts, deletes, /)\n--\n\n"
"Fold the run of plain changes at changes[start:] into a merge step's columnar rows, and\n"
"answer (stop, inserts, updates, deletes, first_touches): the index of the first change\n"
"not folded, how many of each were, and how many updates and deletes were the first\n"
"change of their identity in the step (not yet in rows). A change is folded while it is a row_type instance of relation\n"
"(the same object), committed at timestamp, an insert or update without an old tuple or\n"
"a delete, whose tuple (the new one; a delete's old one) is unsplit (the wire of a\n"
"tuple_type), holds only text values and NULLs and has an identity - pick(..., indexes,\n"
"text) - of values whose types are in plain (a tuple of types). Folding one: an update\n"
"first removes its identity from rows; then rows[identity] = len(folded), and the change,\n"
"its tuple's wire and whether it deletes go to folded, parts and deletes. The first\n"
"change that is anything else stops the run, untouched: the caller plans it the general\n"
"way.");


enum { F_RELATION, F_OLD, F_COMMIT_TIME, F_OP, F_NEW, F_VALUES, F_BUF, F_START, FIELDS };

/* TupleData.wire of ``tuple`` (a new reference: None, or (bytes, start) of a tuple not yet
 * split), read from the slots the property reads when TupleData has them (fields[F_VALUES]
 * and on, looked up by fold), else through the property. NULL with an exception set. */
static PyObject *
unsplit_wire(PyObject *tuple, PyObject *tuple_type, const Field *fields)
{
    if (tuple == Py_None) {
        Py_RETURN_NONE;
    }
    if ((PyObject *)Py_TYPE(tuple) != tuple_type || fields[F_VALUES].member == NULL
        || fields[F_BUF].member == NULL || fields[F_START].member == NULL) {
        return PyObject_GetAttr(tuple, name_wire);
    }
    PyObject *values = read_field(tuple, &fields[F_VALUES]);
    if (values == NULL) {
        return NULL;
    }
    int split = values != Py_None;
    Py_DECREF(values);
    PyObject *buf = split ? (Py_INCREF(Py_None), Py_None) : read_field(tuple, &fields[F_BUF]);
    if (buf == NULL || buf == Py_None) {
        return buf;
    }
    PyObject *start = read_field(tuple, &fields[F_START]);
    PyObject *wire = start == NULL ? NULL : PyTuple_Pack(2, buf, start);
    Py_DECREF(buf);
    Py_XDECREF(start);
    return wire;
}

/* 1 when attribute ``field`` of ``obj`` is ``expected`` (identity), 0 when not, -1 on error. */
static int
attribute_is(PyObject *obj, const Field *field, PyObject *expected)
{
    PyObject *value = read_field(obj, field);
    if (value == NULL) {
        return -1;
    }
    int same = value == expected;
    Py_DECREF(value);
    return same;
}

/* 1 when every value of ``identity`` (a tuple) has exactly one of the types in ``plain``. */
static int
plainly_hashable(PyObject *identity, PyObject *plain)
{
    Py_ssize_t types = PyTuple_GET_SIZE(plain);
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(identity); k++) {
        PyObject *type = (PyObject *)Py_TYPE(PyTuple_GET_ITEM(identity, k));
        Py_ssize_t t = 0;
        while (t < types && PyTuple_GET_ITEM(plain, t) != type) {
            t++;
        }
        if (t == types) {
            return 0;
        }
    }
    return 1;
}

/* Fold ``change`` (see fold_doc): 1 folded as an insert, 2 as an update, 3 as a delete, 0
 * when it is not plain (nothing changed), -1 on an error (an exception is set).
 * ``*first_touch`` becomes 1 when an update or delete finds its identity not in rows. */
static int
fold_one(PyObject *change, PyObject *const *args, const Field *fields, Py_ssize_t count,
         Py_ssize_t *offsets, int *first_touch)
{
    PyObject *row_type = args[2], *tuple_type = args[3], *relation = args[4];
    PyObject *timestamp = args[5], *indexes = args[6], *text = args[7], *plain = args[8];
    PyObject *rows = args[9], *folded = args[10], *parts = args[11], *deletes = args[12];
    if ((PyObject *)Py_TYPE(change) != row_type) {
        return 0;
    }
    int same = attribute_is(change, &fields[F_RELATION], relation);
    if (same <= 0) {
        return same;
    }
    PyObject *value = read_field(change, &fields[F_COMMIT_TIME]);
    if (value == NULL) {
        return -1;
    }
    same = value == timestamp ? 1 : PyObject_RichCompareBool(value, timestamp, Py_EQ);
    Py_DECREF(value);
    if (same <= 0) {
        return same;
    }
    PyObject *op = read_field(change, &fields[F_OP]);
    if (op == NULL) {
        return -1;
    }
    int kind = 0;
    if (PyUnicode_Check(op)) {
        kind = (op == op_insert || PyUnicode_Compare(op, op_insert) == 0)   ? 1
               : (op == op_update || PyUnicode_Compare(op, op_update) == 0) ? 2
               : (op == op_delete || PyUnicode_Compare(op, op_delete) == 0) ? 3
                                                                            : 0;
    }
    Py_DECREF(op);
    if (PyErr_Occurred()) {
        return -1;
    }
    if (kind == 0) {
        return 0;
    }
    /* An insert or update without an old tuple folds its new tuple, a delete its old one. */
    PyObject *old = read_field(change, &fields[F_OLD]);
    if (old == NULL) {
        return -1;
    }
    if ((old != Py_None) != (kind == 3)) { /* an update with an old tuple: the row path's */
        Py_DECREF(old);
        return 0;
    }
    PyObject *tuple = old; /* a delete's */
    if (kind != 3) {
        Py_DECREF(old); /* None */
        tuple = read_field(change, &fields[F_NEW]);
        if (tuple == NULL) {
            return -1;
        }
    }
    PyObject *wire = unsplit_wire(tuple, tuple_type, fields);
    Py_DECREF(tuple);
    if (wire == NULL) {
        return -1;
    }
    const unsigned char *buf;
    Py_ssize_t len, start;
    if (part_at(wire, &buf, &len, &start) < 0) {
        Py_DECREF(wire);
        return 0;
    }
    PyObject *identity = pick_values(buf, len, start, indexes, text, count, offsets,
                                     offsets + count + 1);
    if (identity == NULL || identity == Py_None || !plainly_hashable(identity, plain)) {
        Py_XDECREF(identity);
        Py_DECREF(wire);
        return identity == NULL ? -1 : 0;
    }
    /* As the row path: an insert or delete takes its identity's place, an update moves it
     * last. */
    int result = kind;
    if (kind == 2 && PyDict_DelItem(rows, identity) < 0) {
        if (PyErr_ExceptionMatches(PyExc_KeyError)) {
            PyErr_Clear();
            *first_touch = 1; /* the identity's first change in the step is this update */
        }
        else {
            result = -1;
        }
    }
    else if (kind == 3) {
        int held = PyDict_Contains(rows, identity);
        if (held < 0) {
            result = -1;
        }
        else if (held == 0) {
            *first_touch = 1; /* the identity's first change in the step is this delete */
        }
    }
    PyObject *index = result < 0 ? NULL : PyLong_FromSsize_t(PyList_GET_SIZE(folded));
    if (index == NULL || PyDict_SetItem(rows, identity, index) < 0
        || PyList_Append(folded, change) < 0 || PyList_Append(parts, wire) < 0
        || PyList_Append(deletes, kind == 3 ? Py_True : Py_False) < 0) {
        result = -1;
    }
    Py_XDECREF(index);
    Py_DECREF(identity);
    Py_DECREF(wire);
    return result;
}

static PyObject *
fold(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t start;
    if (start_argument("fold", args, nargs, 13, &start) < 0 || fold_names_ready() < 0) {
        return NULL;
    }
    PyObject *changes = args[0];
    if (!(PyList_CheckExact(changes) || PyTuple_CheckExact(changes))
        || !PyType_Check(args[2]) || !PyType_Check(args[3]) || !PyTuple_CheckExact(args[6])
        || !PyTuple_CheckExact(args[8]) || !PyDict_CheckExact(args[9])
        || !PyList_CheckExact(args[10]) || !PyList_CheckExact(args[11])
        || !PyList_CheckExact(args[12])) {
        PyErr_SetString(PyExc_TypeError,
                        "fold takes a list or tuple of changes, two types, tuples of indexes "
                        "and of types, a dict and three lists");
        return NULL;
    }
    Py_ssize_t count = PyObject_Length(args[7]);
    if (count < 0) {
        return NULL;
    }
    Py_ssize_t *offsets = PyMem_New(Py_ssize_t, 2 * (size_t)(count + 1));
    if (offsets == NULL) {
        return PyErr_NoMemory();
    }
    Field fields[FIELDS];
    field_of(args[2], name_relation, &fields[F_RELATION]);
    field_of(args[2], name_old, &fields[F_OLD]);
    field_of(args[2], name_commit_time, &fields[F_COMMIT_TIME]);
    field_of(args[2], name_op, &fields[F_OP]);
    field_of(args[2], name_new, &fields[F_NEW]);
    field_of(args[3], name_values, &fields[F_VALUES]);
    field_of(args[3], name_buf, &fields[F_BUF]);
    field_of(args[3], name_start, &fields[F_START]);
    Py_ssize_t folded[4] = {0, 0, 0, 0};
    Py_ssize_t at = start < 0 ? 0 : start;
    /* the same macros read a list and a tuple; a list's size is read again every time */
    while (at < PySequence_Fast_GET_SIZE(changes)) {
        PyObject *change = PySequence_Fast_GET_ITEM(changes, at);
        Py_INCREF(change);
        int first_touch = 0;
        int kind = fold_one(change, args, fields, count, offsets, &first_touch);
        Py_DECREF(change);
        if (kind < 0) {
            PyMem_Free(offsets);
            return NULL;
        }
        if (kind == 0) {
            break;
        }
        folded[kind]++;
        folded[0] += first_touch;
        at++;
    }
    PyMem_Free(offsets);
    return Py_BuildValue("(nnnnn)", at, folded[1], folded[2], folded[3], folded[0]);
}

PyDoc_STRVAR(gather_doc,
"gather(parts, count, /)\n--\n\n"
"The text values of TupleData parts, column by column, in Arrow's binary layout: for\n"
"each of the count columns a tuple (offsets, data, validity, null_count) - int32 offsets\n"
"in native order, the values' bytes end to end, a validity bitmap (None without NULLs)\n"
"and the number of NULLs. parts is a list of (bytes, start) tuples. None when a part is\n"
"not such a tuple, does not fit, has another column count or a binary or\n"
"unchanged-TOAST column, or a column's bytes exceed 2 GiB.");

static PyObject *
gather(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (argument_count("gather", nargs, 2) < 0) {
        return NULL;
    }
    PyObject *parts = args[0];
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyList_CheckExact(parts) || count < 0) {
        Py_RETURN_NONE;
    }
    Py_ssize_t rows = PyList_GET_SIZE(parts);
    /* offsets and sizes of one part's columns, then per column its total and NULL count */
    Py_ssize_t *work = PyMem_New(Py_ssize_t, 4 * (size_t)(count + 1));
    if (work == NULL) {
        return PyErr_NoMemory();
    }
    Py_ssize_t *offsets = work, *sizes = work + count + 1;
    Py_ssize_t *totals = sizes + count + 1, *nulls = totals + count + 1;
    PyObject *result = NULL, *columns = NULL;
    PyObject **offset_bytes = NULL, **data_bytes = NULL, **valid_bytes = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        totals[i] = 0;
        nulls[i] = 0;
    }
    const unsigned char *buf;
    Py_ssize_t len, start;
    for (Py_ssize_t r = 0; r < rows; r++) {
        if (part_at(PyList_GET_ITEM(parts, r), &buf, &len, &start) < 0
            || text_columns(buf, len, start, count, offsets, sizes) < 0) {
            goto none;
        }
        for (Py_ssize_t i = 0; i < count; i++) {
            if (sizes[i] < 0) {
                nulls[i]++;
            }
            else {
                totals[i] += sizes[i];
                if (totals[i] > INT32_MAX) {
                    goto none;
                }
            }
        }
    }
    columns = PyList_New(count);
    offset_bytes = PyMem_New(PyObject *, 3 * (size_t)(count + 1));
    if (columns == NULL || offset_bytes == NULL) {
        if (offset_bytes == NULL) {
            PyErr_NoMemory();
        }
        goto fail;
    }
    data_bytes = offset_bytes + count + 1;
    valid_bytes = data_bytes + count + 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        offset_bytes[i] = PyBytes_FromStringAndSize(NULL, (rows + 1) * 4);
        data_bytes[i] = PyBytes_FromStringAndSize(NULL, totals[i]);
        valid_bytes[i] = nulls[i] ? PyBytes_FromStringAndSize(NULL, (rows + 7) / 8) : Py_None;
        if (valid_bytes[i] == Py_None) {
            Py_INCREF(Py_None);
        }
        if (!offset_bytes[i] || !data_bytes[i] || !valid_bytes[i]) {
            Py_XDECREF(offset_bytes[i]);
            Py_XDECREF(data_bytes[i]);
            Py_XDECREF(valid_bytes[i]);
            goto fail;
        }
        /* "N" hands the three references to the tuple, also when building it fails */
        PyObject *column = Py_BuildValue("(NNNn)", offset_bytes[i], data_bytes[i],
                                         valid_bytes[i], nulls[i]);
        if (column == NULL) {
            goto fail;
        }
        PyList_SET_ITEM(columns, i, column); /* the tuple owns the three buffers now */
        ((int32_t *)PyBytes_AS_STRING(offset_bytes[i]))[0] = 0;
        if (nulls[i]) {
            memset(PyBytes_AS_STRING(valid_bytes[i]), 0, (size_t)((rows + 7) / 8));
        }
        totals[i] = 0; /* from here: bytes written so far */
    }
    for (Py_ssize_t r = 0; r < rows; r++) {
        /* the parts are immutable bytes: this walk finds what the first one did */
        part_at(PyList_GET_ITEM(parts, r), &buf, &len, &start);
        text_columns(buf, len, start, count, offsets, sizes);
        for (Py_ssize_t i = 0; i < count; i++) {
            if (sizes[i] >= 0) {
                memcpy(PyBytes_AS_STRING(data_bytes[i]) + totals[i], buf + offsets[i],
                       (size_t)sizes[i]);
                totals[i] += sizes[i];
                if (nulls[i]) {
                    ((unsigned char *)PyBytes_AS_STRING(valid_bytes[i]))[r / 8] |=
                        (unsigned char)(1u << (r % 8));
                }
            }
            ((int32_t *)PyBytes_AS_STRING(offset_bytes[i]))[r + 1] = (int32_t)totals[i];
        }
    }
    result = columns;
    columns = NULL;
fail:
    Py_XDECREF(columns);
    PyMem_Free(offset_bytes);
    PyMem_Free(work);
    return result;
none:
    PyMem_Free(work);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(columnar_meta_doc,
"columnar_meta(rows, changes, deletes, row_type, /)\n--\n\n"
"The metadata columns of a merge step's columnar rows (sink.plan._freeze_step). rows\n"
"iterates the step's row entries: an int is the index in changes (a list of row_type\n"
"objects) of a columnar row, anything else a row planned the general way. Answers\n"
"(others, live, lsns, ordinals, micros, deletes): the other entries, in order; the\n"
"columnar indexes in ascending order as native int64 bytes, or None when every change is\n"
"one; then per such index, in that order, the change's commit_lsn and ordinal as native\n"
"int64 bytes, its commit_time as int64 microseconds since the Unix epoch, and\n"
"deletes[index] as an Arrow bitmap.");

/* Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 UTC). */
#define UNIX_TO_PG_EPOCH_MICROS INT64_C(946684800000000)

/* The value in ``obj``'s slot ``member`` as an int64; -1 with an exception set on failure
 * (check PyErr_Occurred). */
static int64_t
slot_int64(PyObject *obj, PyMemberDef *member)
{
    PyObject *value = PyMember_GetOne((const char *)obj, member);
    if (value == NULL) {
        return -1;
    }
    long long out = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return (int64_t)out;
}

static PyObject *
columnar_meta(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (argument_count("columnar_meta", nargs, 4) < 0) {
        return NULL;
    }
    PyObject *changes = args[1], *deletes = args[2], *row_type = args[3];
    if (!PyList_CheckExact(changes) || !PyList_CheckExact(deletes) || !PyType_Check(row_type)
        || PyList_GET_SIZE(deletes) != PyList_GET_SIZE(changes)) {
        PyErr_SetString(PyExc_TypeError,
                        "columnar_meta takes an iterable, two lists of one length and a type");
        return NULL;
    }
    static const char *const names[] = {"commit_lsn", "ordinal", "commit_time"};
    PyMemberDef *members[3];
    if (members_of(row_type, names, 3, members) < 0) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(changes);
    PyObject *others = PyList_New(0), *iterator = PyObject_GetIter(args[0]);
    unsigned char *seen = PyMem_Calloc((size_t)n / 8 + 1, 1);
    PyObject *live = NULL, *lsns = NULL, *ordinals = NULL, *micros = NULL, *bitmap = NULL;
    if (others == NULL || iterator == NULL || seen == NULL) {
        if (seen == NULL) {
            PyErr_NoMemory();
        }
        goto fail;
    }
    Py_ssize_t count = 0;
    PyObject *entry;
    while ((entry = PyIter_Next(iterator)) != NULL) {
        if (!PyLong_CheckExact(entry)) {
            int appended = PyList_Append(others, entry);
            Py_DECREF(entry);
            if (appended < 0) {
                goto fail;
            }
            continue;
        }
        Py_ssize_t index = PyLong_AsSsize_t(entry);
        Py_DECREF(entry);
        if (index < 0 || index >= n || (seen[index / 8] >> (index % 8)) & 1) {
            if (!PyErr_Occurred()) {
                PyErr_Format(PyExc_ValueError,
                             "columnar row index %zd is out of range or repeated", index);
            }
            goto fail;
        }
        seen[index / 8] |= (unsigned char)(1 << (index % 8));
        count++;
    }
    if (PyErr_Occurred()) {
        goto fail;
    }
    Py_ssize_t size = count * (Py_ssize_t)sizeof(int64_t);
    lsns = PyBytes_FromStringAndSize(NULL, size);
    ordinals = PyBytes_FromStringAndSize(NULL, size);
    micros = PyBytes_FromStringAndSize(NULL, size);
    bitmap = PyBytes_FromStringAndSize(NULL, (count + 7) / 8);
    if (count < n) {
        live = PyBytes_FromStringAndSize(NULL, size);
    }
    else {
        live = Py_NewRef(Py_None);
    }
    if (lsns == NULL || ordinals == NULL || micros == NULL || bitmap == NULL || live == NULL) {
        goto fail;
    }
    memset(PyBytes_AS_STRING(bitmap), 0, (size_t)(count + 7) / 8);
    int64_t *live_out = live == Py_None ? NULL : (int64_t *)PyBytes_AS_STRING(live);
    int64_t *lsn_out = (int64_t *)PyBytes_AS_STRING(lsns);
    int64_t *ordinal_out = (int64_t *)PyBytes_AS_STRING(ordinals);
    int64_t *micros_out = (int64_t *)PyBytes_AS_STRING(micros);
    unsigned char *delete_out = (unsigned char *)PyBytes_AS_STRING(bitmap);
    Py_ssize_t row = 0;
    for (Py_ssize_t index = 0; index < n; index++) {
        if (!((seen[index / 8] >> (index % 8)) & 1)) {
            continue;
        }
        PyObject *change = PyList_GET_ITEM(changes, index);
        if ((PyObject *)Py_TYPE(change) != row_type) {
            PyErr_Format(PyExc_TypeError, "columnar change %zd is not a %R", index, row_type);
            goto fail;
        }
        int64_t time = slot_int64(change, members[2]);
        if (PyErr_Occurred() || (lsn_out[row] = slot_int64(change, members[0]), PyErr_Occurred())
            || (ordinal_out[row] = slot_int64(change, members[1]), PyErr_Occurred())) {
            goto fail;
        }
        if (__builtin_add_overflow(time, UNIX_TO_PG_EPOCH_MICROS, &micros_out[row])) {
            PyErr_SetString(PyExc_OverflowError, "commit time out of range");
            goto fail;
        }
        int deleted = PyObject_IsTrue(PyList_GET_ITEM(deletes, index));
        if (deleted < 0) {
            goto fail;
        }
        if (deleted) {
            delete_out[row / 8] |= (unsigned char)(1 << (row % 8));
        }
        if (live_out != NULL) {
            live_out[row] = index;
        }
        row++;
    }
    PyMem_Free(seen);
    Py_DECREF(iterator);
    return Py_BuildValue("(NNNNNN)", others, live, lsns, ordinals, micros, bitmap);
fail:
    PyMem_Free(seen);
    Py_XDECREF(iterator);
    Py_XDECREF(others);
    Py_XDECREF(live);
    Py_XDECREF(lsns);
    Py_XDECREF(ordinals);
    Py_XDECREF(micros);
    Py_XDECREF(bitmap);
    return NULL;
}

static PyMethodDef methods[] = {
    {"pick", (PyCFunction)(void (*)(void))pick, METH_FASTCALL, pick_doc},
    {"gather", (PyCFunction)(void (*)(void))gather, METH_FASTCALL, gather_doc},
    {"fold", (PyCFunction)(void (*)(void))fold, METH_FASTCALL, fold_doc},
    {"columnar_meta", (PyCFunction)(void (*)(void))columnar_meta, METH_FASTCALL,
     columnar_meta_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "sink._columnar",
    "The sink's columnar planner loops, compiled (see sink.kernel).",
    0,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__columnar(void)
{
    return PyModuleDef_Init(&module_def);
}
