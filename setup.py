"""The decoder's C walk (``decoder/_tuplewalk.c``); everything else is in pyproject.toml.

Optional: a machine without a C compiler still installs a working daemon, which then runs
the Python reference walk (``decoder/native.py``). Kept here rather than in pyproject.toml's
``[tool.setuptools.ext-modules]``, which setuptools still calls experimental.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "decoder._tuplewalk",
            sources=["decoder/_tuplewalk.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
