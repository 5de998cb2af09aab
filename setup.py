"""The two C kernels - the decoder's TupleData walk (``decoder/_tuplewalk.c``) and the sink's
columnar planner loops (``sink/planning/_columnar.c``), which share ``decoder/_tuplewire.h``;
everything else is in pyproject.toml.

Optional: a machine without a C compiler still installs a working daemon, which then runs
the Python reference paths (``decoder/native.py``, ``sink/planning/kernel.py``). Kept here rather
than in pyproject.toml's ``[tool.setuptools.ext-modules]``, which setuptools still calls
experimental.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "decoder._tuplewalk",
            sources=["decoder/_tuplewalk.c"],
            depends=["decoder/_tuplewire.h"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "sink.planning._columnar",
            sources=["sink/planning/_columnar.c"],
            include_dirs=["decoder"],
            depends=["decoder/_tuplewire.h"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
