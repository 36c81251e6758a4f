// collectives.cpp: each c10d collective as weft calls on the group's stream.
//
// Data that is only moved (broadcast, gathers, scatters, all-to-all, send/recv) travels as
// bytes, so every torch dtype moves (bool, complex included); reductions map the dtype to
// weft's (complex as pairs of reals for SUM and AVG), and an unsupported one is an error
// naming it. A non-contiguous tensor is staged in a contiguous copy and copied back after
// completion; a list of output tensors is filled from one flat buffer after completion.
#include <ATen/ATen.h>

#include "process_group_weft.hpp"

namespace weft_torch {

using c10d::OpType;
using c10d::ReduceOp;
using Work = c10::intrusive_ptr<c10d::Work>;
using Tensors = std::vector<at::Tensor>;

namespace {

void check_tensor(const at::Tensor &t, const char *op) {
  TORCH_CHECK(t.device().is_cpu(), "weft: ", op, ": tensor on ", t.device(),
              "; the weft backend takes CPU tensors");
  TORCH_CHECK(t.layout() == at::kStrided, "weft: ", op, ": only dense tensors are supported");
}

void check_one(const Tensors &ts, const char *op) {
  TORCH_CHECK(ts.size() == 1, "weft: ", op, ": one tensor per process expected, got ", ts.size());
  check_tensor(ts[0], op);
}

size_t nbytes(const at::Tensor &t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

weft_datatype_t weft_dtype(at::ScalarType s, const char *op) {
  switch (s) {
    case at::kChar: return WEFT_INT8;
    case at::kByte: return WEFT_UINT8;
    case at::kBool: return WEFT_UINT8;
    case at::kInt: return WEFT_INT32;
    case at::kLong: return WEFT_INT64;
    case at::kHalf: return WEFT_FLOAT16;
    case at::kBFloat16: return WEFT_BFLOAT16;
    case at::kFloat: return WEFT_FLOAT32;
    case at::kDouble: return WEFT_FLOAT64;
    default:
      TORCH_CHECK(false, "weft: ", op, ": dtype ", s, " cannot be reduced by weft (it has int8, "
                  "uint8, int32, int64, float16, bfloat16, float32, float64, and complex for "
                  "sum and avg)");
  }
}

// The weft op for a torch op on dtype s. PREMUL_SUM becomes SUM after the caller scales.
weft_redop_t weft_op(const ReduceOp &op, at::ScalarType s, const char *name) {
  bool complex = at::isComplexType(s);
  switch (op.op_) {
    case ReduceOp::SUM:
    case ReduceOp::PREMUL_SUM: break;
    case ReduceOp::AVG: break;
    default:
      TORCH_CHECK(!complex, "weft: ", name, ": complex tensors support only SUM and AVG");
  }
  TORCH_CHECK(s != at::kBool || op.op_ == ReduceOp::MAX || op.op_ == ReduceOp::MIN, "weft: ", name,
              ": bool tensors support only MAX and MIN");
  switch (op.op_) {
    case ReduceOp::SUM: return WEFT_SUM;
    case ReduceOp::PREMUL_SUM: return WEFT_SUM;
    case ReduceOp::AVG: return WEFT_AVG;
    case ReduceOp::PRODUCT: return WEFT_PROD;
    case ReduceOp::MIN: return WEFT_MIN;
    case ReduceOp::MAX: return WEFT_MAX;
    default:
      TORCH_CHECK(false, "weft: ", name, ": ReduceOp ", static_cast<int>(op.op_),
                  " (BAND, BOR, BXOR) is not supported by weft: use SUM, AVG, PRODUCT, MIN, MAX "
                  "or PREMUL_SUM");
  }
}

// PREMUL_SUM's factor (a double or a one-element tensor), applied to buf in place.
void premultiply(const ReduceOp &op, at::Tensor &buf) {
  if (op.op_ != ReduceOp::PREMUL_SUM) return;
  auto *sup = dynamic_cast<c10d::NCCLPreMulSumSupplement *>(op.supplement_.get());
  TORCH_CHECK(sup != nullptr, "weft: PREMUL_SUM without a factor");
  if (sup->tensor_factors.empty()) buf.mul_(sup->double_factor);
  else buf.mul_(sup->tensor_factors[0].to(at::kCPU));
}

// A contiguous buffer for t: t itself when it is contiguous, else a copy that back() writes
// to t after completion.
struct Staged {
  at::Tensor orig, buf;
  explicit Staged(const at::Tensor &t) : orig(t), buf(t.contiguous()) {}
  bool copied() const { return !buf.is_same(orig); }
  void back() const {
    if (copied()) orig.copy_(buf);
  }
};

// Reduction view of a contiguous buffer: complex as pairs of reals.
at::Tensor reduce_view(const at::Tensor &buf) {
  return at::isComplexType(buf.scalar_type()) ? at::view_as_real(buf) : buf;
}

std::function<void()> copy_back(std::vector<Staged> staged) {
  bool any = false;
  for (auto &s : staged) any = any || s.copied();
  if (!any) return nullptr;
  return [staged] {
    for (auto &s : staged) s.back();
  };
}

// Copies flat (one slice per tensor, in order) into outs after completion.
std::function<void()> unflatten(at::Tensor flat, Tensors outs) {
  return [flat, outs] {
    int64_t off = 0;
    for (const auto &o : outs) {
      o.copy_(flat.narrow(0, off, o.numel()).view_as(o));
      off += o.numel();
    }
  };
}

// The tensors of outs laid end to end (dtype of like), to receive into.
at::Tensor flat_like(const Tensors &outs, const at::Tensor &like) {
  int64_t n = 0;
  for (const auto &o : outs) n += o.numel();
  return at::empty({n}, like.options().memory_format(at::MemoryFormat::Contiguous));
}

at::Tensor flatten_cat(const Tensors &ins) {
  Tensors flat;
  flat.reserve(ins.size());
  for (const auto &t : ins) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void check_same(const Tensors &ts, const at::Tensor &like, size_t want, const char *op) {
  TORCH_CHECK(ts.size() == want, "weft: ", op, ": expected ", want, " tensors, got ", ts.size());
  for (const auto &t : ts) {
    check_tensor(t, op);
    TORCH_CHECK(t.scalar_type() == like.scalar_type() && t.numel() == like.numel(), "weft: ", op,
                ": every tensor must match the input's dtype ", like.scalar_type(), " and ",
                like.numel(), " elements; got ", t.scalar_type(), " and ", t.numel());
  }
}

}  // namespace

Work ProcessGroupWeft::broadcast(Tensors &tensors, const c10d::BroadcastOptions &opts) {
  check_one(tensors, "broadcast");
  Staged s(tensors[0]);
  int root = static_cast<int>(opts.rootRank);
  at::Tensor buf = s.buf;
  return launch(OpType::BROADCAST, "broadcast", tensors, {buf},
                [=](weft_comm_t c, weft_stream_t st) {
                  return weft_broadcast(buf.data_ptr(), buf.data_ptr(), nbytes(buf), WEFT_UINT8,
                                        root, c, st);
                },
                copy_back({s}));
}

Work ProcessGroupWeft::allreduce(Tensors &tensors, const c10d::AllreduceOptions &opts) {
  check_one(tensors, "allreduce");
  weft_redop_t op = weft_op(opts.reduceOp, tensors[0].scalar_type(), "allreduce");
  Staged s(tensors[0]);
  premultiply(opts.reduceOp, s.buf);
  at::Tensor buf = reduce_view(s.buf);
  weft_datatype_t dt = weft_dtype(buf.scalar_type(), "allreduce");
  return launch(OpType::ALLREDUCE, "allreduce", tensors, {buf},
                [=](weft_comm_t c, weft_stream_t st) {
                  return weft_all_reduce(buf.data_ptr(), buf.data_ptr(), buf.numel(), dt, op, c, st);
                },
                copy_back({s}));
}

Work ProcessGroupWeft::allreduce_coalesced(Tensors &tensors,
                                           const c10d::AllreduceCoalescedOptions &opts) {
  std::vector<Staged> staged;
  Tensors bufs;
  std::vector<weft_datatype_t> dts;
  std::vector<weft_redop_t> ops;
  for (auto &t : tensors) {
    check_tensor(t, "allreduce_coalesced");
    ops.push_back(weft_op(opts.reduceOp, t.scalar_type(), "allreduce_coalesced"));
    staged.emplace_back(t);
    premultiply(opts.reduceOp, staged.back().buf);
    bufs.push_back(reduce_view(staged.back().buf));
    dts.push_back(weft_dtype(bufs.back().scalar_type(), "allreduce_coalesced"));
  }
  return launch(OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, bufs,
                [=](weft_comm_t c, weft_stream_t st) {
                  for (size_t i = 0; i < bufs.size(); i++) {
                    weft_status_t r = weft_all_reduce(bufs[i].data_ptr(), bufs[i].data_ptr(),
                                                      bufs[i].numel(), dts[i], ops[i], c, st);
                    if (r != WEFT_SUCCESS) return r;
                  }
                  return WEFT_SUCCESS;
                },
                copy_back(staged));
}

Work ProcessGroupWeft::reduce(Tensors &tensors, const c10d::ReduceOptions &opts) {
  check_one(tensors, "reduce");
  weft_redop_t op = weft_op(opts.reduceOp, tensors[0].scalar_type(), "reduce");
  int root = static_cast<int>(opts.rootRank);
  Staged s(tensors[0]);
  // Off the root the tensor must keep its value, so a premultiplied input is a copy.
  if (opts.reduceOp.op_ == ReduceOp::PREMUL_SUM && rank_ != root && !s.copied()) s.buf = s.buf.clone();
  premultiply(opts.reduceOp, s.buf);
  at::Tensor buf = reduce_view(s.buf);
  weft_datatype_t dt = weft_dtype(buf.scalar_type(), "reduce");
  bool is_root = rank_ == root;
  std::function<void()> after;
  if (is_root) after = copy_back({s});
  return launch(OpType::REDUCE, "reduce", tensors, {buf},
                [=](weft_comm_t c, weft_stream_t st) {
                  return weft_reduce(buf.data_ptr(), is_root ? buf.data_ptr() : nullptr,
                                     buf.numel(), dt, op, root, c, st);
                },
                after);
}

Work ProcessGroupWeft::allgather(std::vector<Tensors> &outputs, Tensors &inputs,
                                 const c10d::AllgatherOptions &opts) {
  check_one(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "weft: allgather: one output list per process expected");
  check_same(outputs[0], inputs[0], size_, "allgather");
  at::Tensor in = inputs[0].contiguous();
  at::Tensor flat = flat_like(outputs[0], in);
  return launch(OpType::ALLGATHER, "allgather", outputs[0], {in, flat},
                [=](weft_comm_t c, weft_stream_t st) {
                  return weft_all_gather(in.data_ptr(), flat.data_ptr(), nbytes(in), WEFT_UINT8, c, st);
                },
                unflatten(flat, outputs[0]));
}

Work ProcessGroupWeft::_allgather_base(at::Tensor &output, at::Tensor &input,
                                       const c10d::AllgatherOptions &opts) {
  check_tensor(input, "_allgather_base");
  check_tensor(output, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type() && output.numel() == input.numel() * size_,
              "weft: _allgather_base: output must hold world size (", size_, ") x ", input.numel(),
              " elements of ", input.scalar_type(), "; got ", output.numel(), " of ", output.scalar_type());
  at::Tensor in = input.contiguous();
  Staged out(output);
  at::Tensor ob = out.buf;
  return launch(OpType::_ALLGATHER_BASE, "_allgather_base", {output}, {in, ob},
                [=](weft_comm_t c, weft_stream_t st) {
                  return weft_all_gather(in.data_ptr(), ob.data_ptr(), nbytes(in), WEFT_UINT8, c, st);
                },
                copy_back({out}));
}

Work ProcessGroupWeft::allgather_coalesced(std::vector<Tensors> &outputs, Tensors &inputs,
                                           const c10d::AllgatherOptions &opts) {
  TORCH_CHECK(outputs.size() == static_cast<size_t>(size_), "weft: allgather_coalesced: expected ",
              size_, " output lists, got ", outputs.size());
  Tensors ins, flats, all_outs;
  std::vector<Tensors> per_input(inputs.size());
  for (size_t i = 0; i < inputs.size(); i++) {
    check_tensor(inputs[i], "allgather_coalesced");
    for (int r = 0; r < size_; r++) {
      TORCH_CHECK(outputs[r].size() == inputs.size(), "weft: allgather_coalesced: output list ", r,
                  " holds ", outputs[r].size(), " tensors, want ", inputs.size());
      per_input[i].push_back(outputs[r][i]);
    }
    check_same(per_input[i], inputs[i], size_, "allgather_coalesced");
    ins.push_back(inputs[i].contiguous());
    flats.push_back(flat_like(per_input[i], ins.back()));
  }
  for (auto &l : outputs) all_outs.insert(all_outs.end(), l.begin(), l.end());
  Tensors keep = ins;
  keep.insert(keep.end(), flats.begin(), flats.end());
  std::vector<std::function<void()>> backs;
  for (size_t i = 0; i < inputs.size(); i++) backs.push_back(unflatten(flats[i], per_input[i]));
  return launch(OpType::ALLGATHER_COALESCED, "allgather_coalesced", all_outs, keep,
                [=](weft_comm_t c, weft_stream_t st) {
                  for (size_t i = 0; i < ins.size(); i++) {
                    weft_status_t r = weft_all_gather(ins[i].data_ptr(), flats[i].data_ptr(),
                                                      nbytes(ins[i]), WEFT_UINT8, c, st);
                    if (r != WEFT_SUCCESS) return r;
                  }
                  return WEFT_SUCCESS;
                },
                [backs] {
                  for (auto &b : backs) b();
                });
}

Work ProcessGroupWeft::gather(std::vector<Tensors> &outputs, Tensors &inputs,
                              const c10d::GatherOptions &opts) {
  check_one(inputs, "gather");
  int root = static_cast<int>(opts.rootRank);
  bool is_root = rank_ == root;
  at::Tensor in = inputs[0].contiguous();
  at::Tensor flat;
  Tensors outs;
  if (is_root) {
    TORCH_CHECK(outputs.size() == 1, "weft: gather: the root needs one output list");
    check_same(outputs[0], in, size_, "gather");
    outs = outputs[0];
    flat = flat_like(outs, in);
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "weft: gather: only the root (", root, ") takes output tensors");
  }
  return launch(OpType::GATHER, "gather", outs, {in, flat},
                [=](weft_comm_t c, weft_stream_t st) {
                  return weft_gather(in.data_ptr(), is_root ? flat.data_ptr() : nullptr, nbytes(in),
                                     WEFT_UINT8, root, c, st);
                },
                is_root ? unflatten(flat, outs) : nullptr);
}

Work ProcessGroupWeft::scatter(Tensors &outputs, std::vector<Tensors> &inputs,
                               const c10d::ScatterOptions &opts) {
  check_one(outputs, "scatter");
  int root = static_cast<int>(opts.rootRank);
  bool is_root = rank_ == root;
  at::Tensor flat;
  if (is_root) {
    TORCH_CHECK(inputs.size() == 1, "weft: scatter: the root needs one input list");
    check_same(inputs[0], outputs[0], size_, "scatter");
    flat = flatten_cat(inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "weft: scatter: only the root (", root, ") takes input tensors");
  }
  Staged out(outputs[0]);
  at::Tensor ob = out.buf;
  return launch(OpType::SCATTER, "scatter", outputs, {flat, ob},
                [=](weft_comm_t c, weft_stream_t st) {
                  return weft_scatter(is_root ? flat.data_ptr() : nullptr, ob.data_ptr(), nbytes(ob),
                                      WEFT_UINT8, root, c, st);
                },
                copy_back({out}));
}

Work ProcessGroupWeft::reduce_scatter(Tensors &outputs, std::vector<Tensors> &inputs,
                                      const c10d::ReduceScatterOptions &opts) {
  check_one(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "weft: reduce_scatter: one input list per process expected");
  check_same(inputs[0], outputs[0], size_, "reduce_scatter");
  weft_redop_t op = weft_op(opts.reduceOp, outputs[0].scalar_type(), "reduce_scatter");
  at::Tensor flat = flatten_cat(inputs[0]);
  premultiply(opts.reduceOp, flat);
  Staged out(outputs[0]);
  at::Tensor in = reduce_view(flat), ob = reduce_view(out.buf);
  weft_datatype_t dt = weft_dtype(ob.scalar_type(), "reduce_scatter");
  return launch(OpType::REDUCE_SCATTER, "reduce_scatter", outputs, {in, ob},
                [=](weft_comm_t c, weft_stream_t st) {
                  return weft_reduce_scatter(in.data_ptr(), ob.data_ptr(), ob.numel(), dt, op, c, st);
                },
                copy_back({out}));
}

Work ProcessGroupWeft::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                            const c10d::ReduceScatterOptions &opts) {
  check_tensor(input, "_reduce_scatter_base");
  check_tensor(output, "_reduce_scatter_base");
  TORCH_CHECK(input.scalar_type() == output.scalar_type() && input.numel() == output.numel() * size_,
              "weft: _reduce_scatter_base: input must hold world size (", size_, ") x ",
              output.numel(), " elements of ", output.scalar_type(), "; got ", input.numel(),
              " of ", input.scalar_type());
  weft_redop_t op = weft_op(opts.reduceOp, output.scalar_type(), "_reduce_scatter_base");
  at::Tensor flat = input.contiguous();
  if (opts.reduceOp.op_ == ReduceOp::PREMUL_SUM) flat = flat.clone();  // the input keeps its value
  premultiply(opts.reduceOp, flat);
  Staged out(output);
  at::Tensor in = reduce_view(flat), ob = reduce_view(out.buf);
  weft_datatype_t dt = weft_dtype(ob.scalar_type(), "_reduce_scatter_base");
  return launch(OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output}, {in, ob},
                [=](weft_comm_t c, weft_stream_t st) {
                  return weft_reduce_scatter(in.data_ptr(), ob.data_ptr(), ob.numel(), dt, op, c, st);
                },
                copy_back({out}));
}

namespace {

// Byte counts and displacements of an all-to-all with split sizes along dim 0 (empty
// splits: equal parts).
void split_bytes(const at::Tensor &t, const std::vector<int64_t> &splits, int size,
                 std::vector<size_t> &counts, std::vector<size_t> &displs, const char *which) {
  int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  size_t row_bytes = rows == 0 ? 0 : nbytes(t) / static_cast<size_t>(rows);
  counts.assign(size, 0);
  displs.assign(size, 0);
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "weft: alltoall_base: ", which, " has ", rows,
                " rows, not divisible by the world size ", size);
  } else {
    TORCH_CHECK(splits.size() == static_cast<size_t>(size), "weft: alltoall_base: ", which,
                " split sizes have ", splits.size(), " entries, want ", size);
  }
  size_t off = 0;
  int64_t total = 0;
  for (int p = 0; p < size; p++) {
    int64_t r = splits.empty() ? rows / size : splits[p];
    TORCH_CHECK(r >= 0, "weft: alltoall_base: negative split size");
    total += r;
    counts[p] = static_cast<size_t>(r) * row_bytes;
    displs[p] = off;
    off += counts[p];
  }
  TORCH_CHECK(total == rows, "weft: alltoall_base: ", which, " split sizes add up to ", total,
              " rows, the tensor has ", rows);
}

}  // namespace

Work ProcessGroupWeft::alltoall_base(at::Tensor &output, at::Tensor &input,
                                     std::vector<int64_t> &outputSplits,
                                     std::vector<int64_t> &inputSplits,
                                     const c10d::AllToAllOptions &opts) {
  check_tensor(input, "alltoall_base");
  check_tensor(output, "alltoall_base");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "weft: alltoall_base: input ",
              input.scalar_type(), " and output ", output.scalar_type(), " differ");
  std::vector<size_t> sc, sd, rc, rd;
  split_bytes(input, inputSplits, size_, sc, sd, "input");
  split_bytes(output, outputSplits, size_, rc, rd, "output");
  at::Tensor in = input.contiguous();
  Staged out(output);
  at::Tensor ob = out.buf;
  if (in.is_alias_of(ob)) in = in.clone();  // weft_all_to_allv is not in-place
  return launch(OpType::ALLTOALL_BASE, "alltoall_base", {output}, {in, ob},
                [=](weft_comm_t c, weft_stream_t st) {
                  return weft_all_to_allv(in.data_ptr(), sc.data(), sd.data(), ob.data_ptr(), rc.data(),
                                          rd.data(), WEFT_UINT8, c, st);
                },
                copy_back({out}));
}

Work ProcessGroupWeft::alltoall(Tensors &outputs, Tensors &inputs, const c10d::AllToAllOptions &opts) {
  TORCH_CHECK(inputs.size() == static_cast<size_t>(size_) && outputs.size() == inputs.size(),
              "weft: alltoall: expected ", size_, " input and output tensors, got ", inputs.size(),
              " and ", outputs.size());
  std::vector<size_t> sc(size_), sd(size_), rc(size_), rd(size_);
  size_t soff = 0, roff = 0;
  for (int p = 0; p < size_; p++) {
    check_tensor(inputs[p], "alltoall");
    check_tensor(outputs[p], "alltoall");
    TORCH_CHECK(inputs[p].scalar_type() == inputs[0].scalar_type() &&
                    outputs[p].scalar_type() == inputs[0].scalar_type(),
                "weft: alltoall: every tensor must have dtype ", inputs[0].scalar_type());
    sc[p] = nbytes(inputs[p]), sd[p] = soff, soff += sc[p];
    rc[p] = nbytes(outputs[p]), rd[p] = roff, roff += rc[p];
  }
  at::Tensor in = flatten_cat(inputs).contiguous();
  at::Tensor flat = flat_like(outputs, inputs[0]);
  return launch(OpType::ALLTOALL, "alltoall", outputs, {in, flat},
                [=](weft_comm_t c, weft_stream_t st) {
                  return weft_all_to_allv(in.data_ptr(), sc.data(), sd.data(), flat.data_ptr(),
                                          rc.data(), rd.data(), WEFT_UINT8, c, st);
                },
                unflatten(flat, outputs));
}

Work ProcessGroupWeft::send(Tensors &tensors, int dst, int tag) {
  check_one(tensors, "send");
  at::Tensor buf = tensors[0].contiguous();
  return launch(OpType::SEND, "send", tensors, {buf}, [=](weft_comm_t c, weft_stream_t st) {
    return weft_send(buf.data_ptr(), nbytes(buf), WEFT_UINT8, dst, c, st);
  });
}

Work ProcessGroupWeft::recv(Tensors &tensors, int src, int tag) {
  check_one(tensors, "recv");
  Staged s(tensors[0]);
  at::Tensor buf = s.buf;
  return launch(OpType::RECV, "recv", tensors, {buf},
                [=](weft_comm_t c, weft_stream_t st) {
                  return weft_recv(buf.data_ptr(), nbytes(buf), WEFT_UINT8, src, c, st);
                },
                copy_back({s}));
}

Work ProcessGroupWeft::recvAnysource(Tensors &tensors, int tag) {
  TORCH_CHECK(false, "weft: recv from any source is not supported: weft matches each receive "
              "to a named source, in order; pass src");
}

Work ProcessGroupWeft::barrier(const c10d::BarrierOptions &opts) {
  return launch(OpType::BARRIER, "barrier", {}, {},
                [](weft_comm_t c, weft_stream_t st) { return weft_barrier(c, st); });
}

}  // namespace weft_torch
