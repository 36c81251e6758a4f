// module.cpp: the Python module weft_torch._C: the creator function torch.distributed
// calls for backend "weft", and the split that builds subgroups (weft_torch/__init__.py).
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

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "weft as a torch.distributed backend (see weft_torch/__init__.py)";
  m.def("create_process_group", &create, py::arg("store"), py::arg("rank"), py::arg("size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>());
  m.def("split", &split, py::arg("parent"), py::arg("color"), py::arg("key"), py::arg("timeout"),
        py::call_guard<py::gil_scoped_release>());
  m.def("is_weft", &is_weft);
  m.attr("SPLIT_NOCOLOR") = WEFT_SPLIT_NOCOLOR;
  int version = 0;
  weft_get_version(&version);
  m.attr("weft_version") = version;
}
