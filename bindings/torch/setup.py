"""Builds weft_torch, weft's torch.distributed backend, against Debian's libtorch-dev.

WEFT_INCLUDE (the folder of weft.h) and WEFT_LIBDIR (the folder of libweft.so) say where
weft is; the build tree's `make torch` and `make install-torch` set both. The extension
finds libweft.so at run time through an rpath to WEFT_LIBDIR.
"""
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))
include = os.environ.get("WEFT_INCLUDE", os.path.join(here, "..", "..", "include"))
libdir = os.environ.get("WEFT_LIBDIR", os.path.join(here, "..", "..", "build", ".libs"))

setup(
    name="weft_torch",
    version="0.1.0",
    description="weft as a torch.distributed process-group backend",
    packages=["weft_torch"],
    ext_modules=[
        CppExtension(
            "weft_torch._C",
            [os.path.join("csrc", f) for f in ("module.cpp", "process_group_weft.cpp", "collectives.cpp")],
            include_dirs=[os.path.abspath(include)],
            library_dirs=[os.path.abspath(libdir)],
            libraries=["weft"],
            runtime_library_dirs=[os.path.abspath(libdir)],
            extra_compile_args=["-O2", "-Wno-unused-parameter"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
