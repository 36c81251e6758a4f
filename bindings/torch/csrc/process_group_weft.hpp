// process_group_weft.hpp: weft as a PyTorch process-group backend (c10d::ProcessGroup of
// PyTorch 1.13, where ProcessGroup is still the base a backend derives from).
//
// Every collective is checked and enqueued on the group's weft stream while the caller goes
// on, so async_op=True overlaps with compute; a completion thread waits on the stream and
// completes each Work (and its Future, which DDP waits on) in order, after any copy-out the
// operation needs (a list of output tensors filled from one flat buffer). A failure becomes
// an exception carrying weft's message (rank, peer, operation), raised by Work.wait().
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <weft.h>

namespace weft_torch {

// One enqueued operation: its Work, the tensors that must live until it completes, and
// what to do after it completes (copy-out), run on the completion thread.
class WorkWeft : public c10d::Work {
 public:
  WorkWeft(int rank, c10d::OpType type, const char *title, std::vector<at::Tensor> outputs);
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  void complete(std::exception_ptr error);

  uint64_t seq = 0;
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> keep;
  std::function<void()> after;
  std::string name;

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// What an operation posts on the stream: weft calls, returning the first failure.
using Post = std::function<weft_status_t(weft_comm_t, weft_stream_t)>;

class ProcessGroupWeft : public c10d::ProcessGroup {
 public:
  // Builds the communicator: rank 0 makes a unique id and shares it through store.
  ProcessGroupWeft(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                   std::chrono::milliseconds timeout);
  // Adopts a communicator made by weft_comm_split (a subgroup).
  ProcessGroupWeft(weft_comm_t comm, int rank, int size, std::chrono::milliseconds timeout);
  ~ProcessGroupWeft() override;

  const std::string getBackendName() const override { return "weft"; }

  // Splits this group's communicator (collective over it): nullptr for WEFT_SPLIT_NOCOLOR.
  c10::intrusive_ptr<ProcessGroupWeft> split(int color, int key, std::chrono::milliseconds timeout);
  weft_comm_t comm() const { return comm_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                           const c10d::BroadcastOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                           const c10d::AllreduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                        const c10d::ReduceOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                           std::vector<at::Tensor> &inputs,
                                           const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                 const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
      const c10d::AllgatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                        std::vector<at::Tensor> &inputs,
                                        const c10d::GatherOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                         std::vector<std::vector<at::Tensor>> &inputs,
                                         const c10d::ScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                std::vector<std::vector<at::Tensor>> &inputs,
                                                const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                               std::vector<int64_t> &outputSplits,
                                               std::vector<int64_t> &inputSplits,
                                               const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::AllToAllOptions &opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor> &tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor> &tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor> &tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;

  // Enqueues post on the stream and returns its Work; after runs once it has completed.
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const char *name,
                                        std::vector<at::Tensor> outputs,
                                        std::vector<at::Tensor> keep, const Post &post,
                                        std::function<void()> after = nullptr);

 private:
  void start();
  void completion_loop();
  void drain();  // waits until every enqueued operation has completed (caller holds no lock)
  [[noreturn]] void fail(const char *what, weft_status_t st);

  weft_comm_t comm_ = nullptr;
  weft_stream_t stream_ = nullptr;
  std::chrono::milliseconds timeout_;

  std::mutex mu_;                  // guards the queue below and the order of enqueues
  std::condition_variable queued_; // an operation was enqueued, or stop
  std::condition_variable idle_;   // the queue drained
  std::deque<c10::intrusive_ptr<WorkWeft>> pending_;
  uint64_t enqueued_ = 0;
  bool stop_ = false;
  std::string first_error_;        // the first failure of a stream operation
  std::thread completer_;
};

}  // namespace weft_torch
