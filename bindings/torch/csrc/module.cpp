// module.cpp: the Python module weft_torch._C: the creator function torch.distributed
// calls for backend "weft", the split that builds subgroups, and buffer registration
// (weft_torch/__init__.py).
#include <torch/extension.h>
#include <pybind11/chrono.h>

#include "process_group_weft.hpp"

namespace {

using weft_torch::ProcessGroupWeft;

std::chrono::milliseconds to_ms(const std::chrono::duration<float> &t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t);
}

c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store> &store,
                                              int rank, int size,
                                              const std::chrono::duration<float> &timeout) {
  return c10::make_intrusive<ProcessGroupWeft>(store, rank, size, to_ms(timeout));
}

// Collective over parent: the child group of this rank's color, or None for
// WEFT_SPLIT_NOCOLOR (-1).
c10::intrusive_ptr<c10d::ProcessGroup> split(const c10::intrusive_ptr<c10d::ProcessGroup> &parent,
                                             int color, int key,
                                             const std::chrono::duration<float> &timeout) {
  auto *pg = dynamic_cast<ProcessGroupWeft *>(parent.get());
  TORCH_CHECK(pg != nullptr, "weft: split: the parent group is not a weft process group");
  return pg->split(color, key, to_ms(timeout));
}

bool is_weft(const c10::intrusive_ptr<c10d::ProcessGroup> &pg) {
  return dynamic_cast<ProcessGroupWeft *>(pg.get()) != nullptr;
}

ProcessGroupWeft *weft_group(const c10::intrusive_ptr<c10d::ProcessGroup> &pg, const char *op) {
  auto *w = dynamic_cast<ProcessGroupWeft *>(pg.get());
  TORCH_CHECK(w != nullptr, "weft: ", op, ": the group is not a weft process group");
  return w;
}

// weft_comm_register of t's elements on pg's communicator (this rank alone); the handle as
// an integer. The caller (weft_torch.register) keeps t alive until it deregisters.
uintptr_t register_tensor(const c10::intrusive_ptr<c10d::ProcessGroup> &pg, const at::Tensor &t) {
  ProcessGroupWeft *w = weft_group(pg, "register");
  TORCH_CHECK(t.device().is_cpu() && t.layout() == at::kStrided && t.is_contiguous() && t.numel() > 0,
              "weft: register: a non-empty contiguous CPU tensor is needed");
  weft_reg_t reg = nullptr;
  weft_status_t st = weft_comm_register(w->comm(), t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size(),
                                        &reg);
  TORCH_CHECK(st == WEFT_SUCCESS, "weft: register: ", weft_get_last_error(w->comm()));
  return reinterpret_cast<uintptr_t>(reg);
}

void deregister_tensor(const c10::intrusive_ptr<c10d::ProcessGroup> &pg, uintptr_t handle) {
  ProcessGroupWeft *w = weft_group(pg, "deregister");
  weft_status_t st = weft_comm_deregister(w->comm(), reinterpret_cast<weft_reg_t>(handle));
  TORCH_CHECK(st == WEFT_SUCCESS, "weft: deregister: ", weft_get_last_error(w->comm()));
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "weft as a torch.distributed backend (see weft_torch/__init__.py)";
  m.def("create_process_group", &create, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>());
  m.def("split", &split, py::arg("parent"), py::arg("color"), py::arg("key"), py::arg("timeout"),
        py::call_guard<py::gil_scoped_release>());
  m.def("is_weft", &is_weft);
  m.def("register_tensor", &register_tensor, py::arg("group"), py::arg("tensor"),
        py::call_guard<py::gil_scoped_release>());
  m.def("deregister_tensor", &deregister_tensor, py::arg("group"), py::arg("handle"),
        py::call_guard<py::gil_scoped_release>());
  m.attr("SPLIT_NOCOLOR") = WEFT_SPLIT_NOCOLOR;
  int version = 0;
  weft_get_version(&version);
  m.attr("weft_version") = version;
}
