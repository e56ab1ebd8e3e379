"""Known errors. The CLI prints these as one `Error: ...` line and exits 1."""


class MlminilmError(Exception):
    """A problem the user can fix; the message says what and how."""


class ConfigError(MlminilmError):
    """Options that cannot work together, or a model that does not fit the method."""


class DataError(MlminilmError):
    """Input data that is missing, empty or malformed."""


class CheckpointError(MlminilmError):
    """A checkpoint or output directory that cannot be used as asked."""


class TrainingDiverged(MlminilmError):
    """The loss turned NaN or infinite."""
