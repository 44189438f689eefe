"""A PEP 517 build backend with no build requirements, so that
`pip install ./contrib/python` works offline on a fresh machine (pip's
isolated build would otherwise download setuptools). The package is pure
Python: the wheel is the sources under src/weft plus the metadata."""
import base64
import hashlib
import io
import os
import re
import subprocess
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYPROJECT = os.path.join(ROOT, "pyproject.toml")
TOP = os.path.dirname(os.path.dirname(ROOT))  # weft's source tree, when this is in one
VERSION_PY = os.path.join(ROOT, "src", "weft", "_version.py")


def _version():
    """weft's version, as configure.ac's AC_INIT has it (one place): the base
    version there through contrib/scripts/version.sh (a release tarball's
    .tarball-version, or a snapshot's BASE.devN+gHASH); in an sdist of this
    package, the _version.py that build_sdist wrote."""
    configure_ac = os.path.join(TOP, "configure.ac")
    if os.path.exists(configure_ac):
        m = re.search(r"version\.sh\s+([0-9][^\]\s]*)\]", open(configure_ac, encoding="utf-8").read())
        if not m:
            raise RuntimeError(f"no version in {configure_ac}'s AC_INIT")
        script = os.path.join(TOP, "contrib", "scripts", "version.sh")
        return subprocess.run(["sh", script, m.group(1)], check=True, capture_output=True, text=True).stdout.strip()
    if os.path.exists(VERSION_PY):
        m = re.search(r'^__version__ = "([^"]+)"', open(VERSION_PY, encoding="utf-8").read(), re.M)
        if m:
            return m.group(1)
    raise RuntimeError(f"weft's version: neither {configure_ac} nor {VERSION_PY} exists")


def _version_py():
    return f'"""weft\'s version (written by the build backend)."""\n__version__ = "{_version()}"\n'.encode()


def _project():
    text = open(PYPROJECT, encoding="utf-8").read()
    section = text.split("[project]", 1)[1].split("\n[", 1)[0]

    def field(name):
        m = re.search(r"^%s\s*=\s*\"([^\"]*)\"" % name, section, re.M)
        return m.group(1) if m else ""

    return field("name"), _version(), field("description"), field("requires-python")


def _metadata():
    name, version, summary, requires = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", f"Summary: {summary}"]
    if requires:
        lines.append(f"Requires-Python: {requires}")
    lines += ["Provides-Extra: numpy", 'Requires-Dist: numpy; extra == "numpy"']
    readme = os.path.join(ROOT, "README.md")
    body = open(readme, encoding="utf-8").read() if os.path.exists(readme) else ""
    return "\n".join(lines + ["Description-Content-Type: text/markdown", "", body])


def _package_files():
    src = os.path.join(ROOT, "src")
    for base, _, files in os.walk(os.path.join(src, "weft")):
        for f in sorted(files):
            if f.endswith((".py", ".typed")) and f != "_version.py":
                path = os.path.join(base, f)
                yield path, os.path.relpath(path, src)


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name, version, _, _ = _project()
    dist_info = f"{name}-{version}.dist-info"
    wheel_name = f"{name}-{version}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as whl:

        def add(arcname, data):
            whl.writestr(arcname, data)
            record.append(_record_line(arcname, data))

        for path, arcname in _package_files():
            add(arcname, open(path, "rb").read())
        add("weft/_version.py", _version_py())
        add(f"{dist_info}/METADATA", _metadata().encode())
        add(f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: weft_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        add(f"{dist_info}/top_level.txt", b"weft\n")
        record.append(f"{dist_info}/RECORD,,")
        whl.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel_name


def _sdist_filter(t):
    return None if "__pycache__" in t.name or t.name.endswith("/_version.py") else t


def build_sdist(sdist_directory, config_settings=None):
    name, version, _, _ = _project()
    base = f"{name}-{version}"
    out = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(out, "w:gz") as tar:
        for entry in ("pyproject.toml", "README.md", "_build", "src"):
            path = os.path.join(ROOT, entry)
            if os.path.exists(path):
                tar.add(path, arcname=f"{base}/{entry}", filter=_sdist_filter)
        for arcname, data in ((f"{base}/PKG-INFO", _metadata().encode()), (f"{base}/src/weft/_version.py", _version_py())):
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return os.path.basename(out)


if __name__ == "__main__":
    print(_version())
