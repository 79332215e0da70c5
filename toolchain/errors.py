"""One exception hierarchy, one exit code per class; the CLI catches it once at the top."""

from __future__ import annotations


class ToolchainError(Exception):
    """An expected failure: printed as one message plus a hint, never as a traceback."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(ToolchainError):
    """The command line or a setting is wrong."""

    exit_code = 2


class UnsupportedHostError(ToolchainError):
    """The machine (or the saved description of one) is one vLLM's CPU backend cannot run on."""

    exit_code = 3


class DataFileError(ToolchainError):
    """A recipe or data table is malformed, or an sdist says what `new-recipe` does not know;
    the message names the file and the key (or what was not recognised)."""

    exit_code = 4


class PlanError(ToolchainError):
    """The requested build cannot be planned: wrong target, Python or memory."""

    exit_code = 5


class ToolMissingError(ToolchainError):
    """A program the step needs is not installed."""

    exit_code = 6


class ProcessFailedError(ToolchainError):
    """A program ran and failed."""

    exit_code = 7


class SourceError(ToolchainError):
    """A source is missing, unreachable, or does not match the hash its recipe records."""

    exit_code = 8


class ProvisionError(ToolchainError):
    """A private g++ could not be provisioned."""

    exit_code = 9


class BuildError(ToolchainError):
    """A build step found the build itself wrong: compiler, torch, the wheel it made."""

    exit_code = 10


class KernelCheckError(ToolchainError):
    """The environment to check has no CPU build of vLLM whose kernels could be loaded (none
    installed, or one without the CPU kernel libraries _C*.so)."""

    exit_code = 11


class PublishError(ToolchainError):
    """The index could not be written, or an upload was refused; nothing half-done is left."""

    exit_code = 12


class BusyError(ToolchainError):
    """Another run holds the lock of the same folder (a build folder, a verify work folder)."""

    exit_code = 13


class NotReadyError(ToolchainError):
    """`plan --check`: something the build needs is not here (a source, torch, disk, a folder)."""

    exit_code = 14
