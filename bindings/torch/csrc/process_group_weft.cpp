// process_group_weft.cpp: the group's lifetime (communicator, stream, completion thread),
// Work objects and the split into subgroups. The collectives are in collectives.cpp.
#include <Python.h>

#include "process_group_weft.hpp"

#include <climits>
#include <cstring>

namespace weft_torch {

namespace {

constexpr const char *kUniqueIdKey = "weft_unique_id";

int to_timeout_ms(std::chrono::milliseconds t) {
  if (t.count() <= 0) return WEFT_CONFIG_UNDEF_INT;  // weft's default (WEFT_TIMEOUT_MS)
  return t.count() > INT_MAX ? INT_MAX : static_cast<int>(t.count());
}

weft_config_t make_config(std::chrono::milliseconds timeout) {
  weft_config_t cfg = WEFT_CONFIG_INITIALIZER;
  cfg.timeout_ms = to_timeout_ms(timeout);
  return cfg;
}

// Rank 0 creates the id and publishes it in the store (as ProcessGroupNCCL does with
// NCCL's); the others wait for it there, within the store's own timeout.
weft_unique_id_t exchange_unique_id(const c10::intrusive_ptr<c10d::Store> &store, int rank) {
  weft_unique_id_t id;
  if (rank == 0) {
    weft_status_t st = weft_get_unique_id(&id);
    TORCH_CHECK(st == WEFT_SUCCESS, "weft: rank 0: weft_get_unique_id failed: ",
                weft_get_last_error(nullptr));
    const auto *p = reinterpret_cast<const uint8_t *>(id.internal);
    store->set(kUniqueIdKey, std::vector<uint8_t>(p, p + sizeof(id.internal)));
    return id;
  }
  std::vector<uint8_t> bytes = store->get(kUniqueIdKey);
  TORCH_CHECK(bytes.size() == sizeof(id.internal), "weft: rank ", rank,
              ": the store holds a unique id of ", bytes.size(), " bytes, want ",
              sizeof(id.internal));
  std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  return id;
}

}  // namespace

WorkWeft::WorkWeft(int rank, c10d::OpType type, const char *title, std::vector<at::Tensor> outs)
    : c10d::Work(rank, type, title), outputs(std::move(outs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

c10::intrusive_ptr<c10::ivalue::Future> WorkWeft::getFuture() { return future_; }

std::vector<at::Tensor> WorkWeft::result() { return outputs; }

// On the completion thread: copy-out, then the Future (DDP waits on it), then the Work.
void WorkWeft::complete(std::exception_ptr error) {
  if (!error && after) {
    try {
      after();
    } catch (...) {
      error = std::current_exception();
    }
  }
  keep.clear();
  if (error) future_->setError(error);
  else future_->markCompleted(c10::IValue(outputs));
  finish(error);
}

ProcessGroupWeft::ProcessGroupWeft(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                   int size, std::chrono::milliseconds timeout)
    : ProcessGroup(rank, size), timeout_(timeout) {
  weft_unique_id_t id = exchange_unique_id(store, rank);
  weft_config_t cfg = make_config(timeout);
  weft_status_t st = weft_comm_init_rank_config(&comm_, size, id, rank, &cfg);
  if (st != WEFT_SUCCESS) fail("communicator init", st);
  start();
}

ProcessGroupWeft::ProcessGroupWeft(weft_comm_t comm, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : ProcessGroup(rank, size), comm_(comm), timeout_(timeout) {
  start();
}

void ProcessGroupWeft::start() {
  weft_status_t st = weft_stream_create(&stream_);
  if (st != WEFT_SUCCESS) {
    weft_comm_destroy(comm_);
    comm_ = nullptr;
    fail("stream create", st);
  }
  completer_ = std::thread([this] { completion_loop(); });
  init();
}

// Tensors freed on the completion thread may take the GIL (PyTorch hands a tensor's last
// reference back to its Python object under the GIL), so the destructor, which Python runs
// holding the GIL, lets go of it while it waits for that thread.
ProcessGroupWeft::~ProcessGroupWeft() {
  PyThreadState *saved = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  queued_.notify_all();
  if (completer_.joinable()) completer_.join();
  if (stream_ != nullptr) weft_stream_destroy(stream_);
  if (comm_ != nullptr) {
    if (first_error_.empty()) weft_comm_destroy(comm_);
    else weft_comm_abort(comm_);
  }
  if (saved != nullptr) PyEval_RestoreThread(saved);
}

void ProcessGroupWeft::fail(const char *what, weft_status_t st) {
  std::string msg = weft_get_last_error(comm_);
  if (msg.empty()) msg = weft_get_last_error(nullptr);
  if (!first_error_.empty() && msg.find(first_error_) == std::string::npos)
    msg += " (first failure on this group: " + first_error_ + ")";
  TORCH_CHECK(false, "weft: rank ", rank_, ": ", what, " failed (", weft_get_error_string(st),
              "): ", msg);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupWeft::launch(c10d::OpType type, const char *name,
                                                        std::vector<at::Tensor> outputs,
                                                        std::vector<at::Tensor> keep,
                                                        const Post &post,
                                                        std::function<void()> after) {
  std::string title = std::string("weft:") + name;
  auto work = c10::make_intrusive<WorkWeft>(rank_, type, title.c_str(), std::move(outputs));
  work->keep = std::move(keep);
  work->after = std::move(after);
  work->name = name;
  std::lock_guard<std::mutex> g(mu_);
  weft_status_t st = post(comm_, stream_);
  if (st != WEFT_SUCCESS) fail(name, st);
  work->seq = ++enqueued_;
  pending_.push_back(work);
  queued_.notify_one();
  return work;
}

// Waits on the stream for everything enqueued so far, then completes those Works in order.
// weft_stream_synchronize reports the first failure since the last call: every Work of that
// batch carries it (the communicator is unusable after a failure anyway).
void ProcessGroupWeft::completion_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    queued_.wait(lk, [&] { return stop_ || !pending_.empty(); });
    if (pending_.empty()) break;
    uint64_t upto = enqueued_;
    lk.unlock();
    weft_status_t st = weft_stream_synchronize(stream_);
    std::string msg = st == WEFT_SUCCESS ? "" : weft_get_last_error(comm_);
    lk.lock();
    if (st != WEFT_SUCCESS && first_error_.empty()) first_error_ = msg;
    std::vector<c10::intrusive_ptr<WorkWeft>> done;
    while (!pending_.empty() && pending_.front()->seq <= upto) {
      done.push_back(pending_.front());
      pending_.pop_front();
    }
    lk.unlock();
    for (auto &w : done) {
      std::exception_ptr e;
      if (st != WEFT_SUCCESS)
        e = std::make_exception_ptr(std::runtime_error(
            "weft: rank " + std::to_string(rank_) + ": " + w->name + " failed (" +
            weft_get_error_string(st) + "): " + msg));
      w->complete(e);
    }
    done.clear();  // may free tensors, which may take the GIL: never under mu_
    lk.lock();
    if (pending_.empty()) idle_.notify_all();
  }
}

void ProcessGroupWeft::drain() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_.wait(lk, [&] { return pending_.empty(); });
}

c10::intrusive_ptr<ProcessGroupWeft> ProcessGroupWeft::split(int color, int key,
                                                             std::chrono::milliseconds timeout) {
  drain();  // the split's all-gathers run on the calling thread, after everything queued
  weft_config_t cfg = make_config(timeout);
  weft_comm_t child = nullptr;
  weft_status_t st;
  {
    std::lock_guard<std::mutex> g(mu_);
    st = weft_comm_split(comm_, color, key, &child, &cfg);
  }
  if (st != WEFT_SUCCESS) fail("comm_split", st);
  if (child == nullptr) return c10::intrusive_ptr<ProcessGroupWeft>();
  int rank = 0, size = 0;
  weft_comm_user_rank(child, &rank);
  weft_comm_count(child, &size);
  return c10::make_intrusive<ProcessGroupWeft>(child, rank, size, timeout);
}

}  // namespace weft_torch
