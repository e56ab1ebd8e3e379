"""Package discovery for setuptools (everything else is in pyproject.toml).

The wheel holds every folder with an `__init__.py` under `mlminilm/`, plus the two folders that pyproject.toml's
`package-dir` installs under other names: `commands/` as `mlminilm.commands` and `langs/` as `mlminilm.langs`.
"""

from setuptools import find_packages, setup

# Folders of the repository installed as subpackages of mlminilm (pyproject.toml's package-dir says the same).
RENAMED = {"mlminilm.commands": "commands", "mlminilm.langs": "langs"}


def packages() -> list[str]:
    found = find_packages(include=["mlminilm", "mlminilm.*"])
    for name, folder in RENAMED.items():
        found += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]
    return sorted(found)


setup(packages=packages())
