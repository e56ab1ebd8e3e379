"""Known errors. The CLI prints these as one `Error: ...` line and exits 1."""


class MlminilmError(Exception):
    """A problem the user can fix; the message says what and how."""


class ConfigError(MlminilmError):
    """Options that cannot work together, or a model that does not fit the method."""


class UsageError(ConfigError):
    """An option given without the one it only applies with (`export --strict` without `--check`): the command
    line reports it as click reports a missing option, a usage error with exit 2; Python callers get a ConfigError."""


class DataError(MlminilmError):
    """Input data that is missing, empty or malformed."""


class CheckpointError(MlminilmError):
    """A checkpoint or output directory that cannot be used as asked."""


class TrainingDiverged(MlminilmError):
    """The loss turned NaN or infinite."""


class Problems:
    """Every problem the cheap checks before a command's work find, reported at once as one error (of the first
    problem's class, so the exit code and message kind stay those of the first)."""

    def __init__(self):
        self.errors: list[MlminilmError] = []

    def add(self, error: MlminilmError) -> None:
        self.errors.append(error)

    def attempt(self, check):
        """`check()`'s result, or None when it raised a known error (kept for `raise_any`)."""
        try:
            return check()
        except MlminilmError as exc:
            self.errors.append(exc)
            return None

    def raise_any(self) -> None:
        if self.errors:
            # The same problem found twice (one bad file given twice) is said once.
            raise type(self.errors[0])("; ".join(dict.fromkeys(str(e) for e in self.errors)))
