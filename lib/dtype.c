/* dtype.c: element sizes and the names weft prints for datatypes and reduction operations.
 *
 * The names are the ones nccl-tests prints, so weft's perf output lines up with theirs
 * column by column. Everything here is a table lookup guarded by a range check, because
 * these values arrive straight from the public API and may be anything. */
#include "lib/dtype.h"

const size_t weft__dtype_sizes[WEFT_NUM_DATATYPES] = {
    [WEFT_INT8] = 1,    [WEFT_UINT8] = 1,   [WEFT_INT32] = 4,   [WEFT_UINT32] = 4,
    [WEFT_INT64] = 8,   [WEFT_UINT64] = 8,  [WEFT_FLOAT16] = 2, [WEFT_FLOAT32] = 4,
    [WEFT_FLOAT64] = 8, [WEFT_BFLOAT16] = 2,
};

static const char *const dtype_names[WEFT_NUM_DATATYPES] = {
    [WEFT_INT8] = "int8",      [WEFT_UINT8] = "uint8",   [WEFT_INT32] = "int32",
    [WEFT_UINT32] = "uint32",  [WEFT_INT64] = "int64",   [WEFT_UINT64] = "uint64",
    [WEFT_FLOAT16] = "half",   [WEFT_FLOAT32] = "float", [WEFT_FLOAT64] = "double",
    [WEFT_BFLOAT16] = "bfloat16",
};

static const char *const op_names[WEFT_NUM_OPS] = {
    [WEFT_SUM] = "sum", [WEFT_PROD] = "prod", [WEFT_MAX] = "max",
    [WEFT_MIN] = "min", [WEFT_AVG] = "avg",
};

const char *weft__dtype_name(weft_datatype_t dt) {
  return weft__dtype_valid(dt) ? dtype_names[dt] : "invalid";
}

const char *weft__op_name(weft_redop_t op) {
  return weft__op_valid(op) ? op_names[op] : "invalid";
}

size_t weft_datatype_size(weft_datatype_t datatype) {
  return weft__dtype_size(datatype);
}
