"""Builds the package with its gRPC stubs generated from rowcall's .proto files.

The stubs (``rowcall/v1/*_pb2.py``, their ``.pyi`` types and ``*_pb2_grpc.py``) are never
committed: every build runs grpcio-tools over ``proto/proto`` of the repository (or over
the copy an sdist carries, or ``ROWCALL_PROTO_DIR``), so they always match the protos.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
PROTOS = ("rowcall/v1/types.proto", "rowcall/v1/api.proto")


def proto_dir() -> Path:
    """Where the .proto files are: the environment's word, the repository, or an sdist's copy."""
    candidates = [os.environ.get("ROWCALL_PROTO_DIR"), HERE.parent.parent / "proto" / "proto",
                  HERE / "proto"]
    for candidate in candidates:
        if candidate and all((Path(candidate) / p).is_file() for p in PROTOS):
            return Path(candidate)
    raise SystemExit(
        "rowcall: cannot find the .proto files (looked in ../../proto/proto and ./proto); "
        "set ROWCALL_PROTO_DIR to the repository's proto/proto folder"
    )


def generate(out: Path) -> None:
    """Runs grpcio-tools' protoc over the public API into ``out/rowcall/v1``."""
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc", f"-I{proto_dir()}", f"-I{include}", f"--python_out={out}",
            f"--pyi_out={out}", f"--grpc_python_out={out}", *PROTOS]
    if protoc.main(args) != 0:
        raise SystemExit("rowcall: grpcio-tools failed to compile the .proto files")
    (out / "rowcall" / "v1" / "__init__.py").write_text(
        '"""rowcall.v1: messages and stubs generated from proto/ at build time."""\n'
    )


class BuildWithStubs(build_py):
    """build_py that first generates the stubs into the build folder (or in place)."""

    def run(self) -> None:
        super().run()
        target = HERE if self.editable_mode else Path(self.build_lib)
        generate(target)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        v1 = Path(self.build_lib) / "rowcall" / "v1"
        for name in ("__init__.py", "types_pb2.py", "types_pb2.pyi", "types_pb2_grpc.py",
                     "api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"):
            outputs.append(str(v1 / name))
        return outputs


setup(cmdclass={"build_py": BuildWithStubs})
