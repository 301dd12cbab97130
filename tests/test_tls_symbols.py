"""Where OpenSSL's writes sit in the files a process maps: kmon's own ELF reading against the
dynamic linker's (libssl) and binutils' ``nm`` (librdkafka's static OpenSSL, in ``.symtab``
only); a hostile file costs a bounded read and one clear error."""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from kmon.sources.tls.elf_symbols import ELF_HEADER, NotElf, function_offsets, object_addresses
from kmon.sources.tls.tls_tap import FUNCTIONS, GO_TCP_ITAB

pytestmark = pytest.mark.integration  # binutils' nm and readelf are the independent truth

LIBSSL = next(iter(sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libssl.so.3"))), None)


def _wheel_librdkafka() -> str | None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    found = sorted(Path(confluent_kafka.__file__).parent.parent.glob(
        "confluent_kafka.libs/librdkafka-*.so*"))
    return str(found[0]) if found else None


@pytest.mark.skipif(LIBSSL is None, reason="no libssl.so.3 here")
def test_libssl_offsets_are_where_the_dynamic_linker_puts_the_functions():
    lib = ctypes.CDLL(LIBSSL)
    offsets = function_offsets(LIBSSL, ["SSL_write", "SSL_write_ex"])
    assert set(offsets) == {"SSL_write", "SSL_write_ex"}
    base = _load_base(LIBSSL)
    for name, offset in offsets.items():
        address = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
        assert address - base == offset  # libssl's text maps at its file offset + base


def test_static_openssl_inside_librdkafka_is_found_in_symtab():
    path = _wheel_librdkafka()
    if path is None or shutil.which("nm") is None:
        pytest.skip("no confluent-kafka wheel library, or no nm")
    dynamic = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                             text=True, check=True).stdout.split()
    assert "SSL_write" not in dynamic  # not in the dynamic symbols: .symtab must be read
    static = dict(line.split()[::-2] for line in subprocess.run(
        ["nm", "--defined-only", path], capture_output=True, text=True, check=True
    ).stdout.splitlines() if len(line.split()) == 3)
    offsets = function_offsets(path, ["SSL_write", "SSL_write_ex"])
    assert offsets and all(offset == _file_offset(path, int(static[name], 16))
                           for name, offset in offsets.items())


def _nm(path: str) -> dict[str, int]:
    """binutils' view of a file's defined symbols: name -> address."""
    lines = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    return {parts[2]: int(parts[0], 16) for line in lines if len(parts := line.split(" ", 2)) == 3}


@pytest.mark.skipif(shutil.which("node") is None or shutil.which("nm") is None,
                    reason="no node, or no nm")
def test_openssl_built_into_the_node_executable_is_found():
    node = str(Path(shutil.which("node")).resolve())
    offsets = function_offsets(node, FUNCTIONS)
    assert "SSL_write" in offsets  # node's TLS sockets call SSL_write
    symbols = _nm(node)
    assert all(offset == _file_offset(node, symbols[name]) for name, offset in offsets.items())


@pytest.mark.skipif(shutil.which("go") is None or shutil.which("nm") is None,
                    reason="no go, or no nm")
def test_go_tls_write_and_the_tcp_conn_table_are_found_in_a_go_program(go_consumer):
    """``crypto/tls.(*Conn).Write`` (a function: its file offset) and ``*net.TCPConn``'s
    ``net.Conn`` interface table (an object: its address) in the program's .symtab."""
    symbols = _nm(go_consumer)
    offsets = function_offsets(go_consumer, FUNCTIONS)
    assert set(offsets) == {"crypto/tls.(*Conn).Write"}
    assert offsets["crypto/tls.(*Conn).Write"] == _file_offset(
        go_consumer, symbols["crypto/tls.(*Conn).Write"])
    found, lowest = object_addresses(go_consumer, [GO_TCP_ITAB, "crypto/tls.(*Conn).Write"])
    assert found == {GO_TCP_ITAB: symbols[GO_TCP_ITAB]}  # objects only, never a function
    assert lowest == min(vaddr - offset for offset, vaddr in _loads(go_consumer))


@pytest.mark.parametrize("damage", ["not elf", "cut", "huge tables", "32-bit",
                                    "tables past 2^64"])
def test_a_hostile_file_is_refused_in_a_bounded_read(tmp_path, damage):
    data = bytearray(Path(LIBSSL or "/bin/ls").read_bytes()[:4096])
    if damage == "not elf":
        data[:4] = b"MZ\0\0"
    elif damage == "cut":
        del data[ELF_HEADER.size - 8:]
    elif damage == "huge tables":  # a section table as long as 65535 entries, past the end
        struct.pack_into("<QH", data, 0x28, 1 << 40, 0)
        struct.pack_into("<H", data, 0x3C, 65535)
    elif damage == "tables past 2^64":  # os.pread raised OverflowError, which no caller caught
        struct.pack_into("<Q", data, 0x28, (1 << 64) - 8)
    else:
        data[4] = 1
    path = tmp_path / "libssl.so.3"
    path.write_bytes(bytes(data))
    with pytest.raises(NotElf):
        function_offsets(str(path), ["SSL_write"])


@pytest.mark.skipif(LIBSSL is None, reason="no libssl.so.3 here")
def test_a_fifo_or_another_file_put_at_the_mapped_path_is_refused_at_once(tmp_path):
    """The path a process maps is its to swap between kmon's look at its maps and the open:
    a FIFO there blocked the poll thread in open() for as long as nobody wrote to it."""
    fifo = tmp_path / "libssl.so.3"
    os.mkfifo(fifo)
    with pytest.raises(NotElf):
        function_offsets(str(fifo), ["SSL_write"])
    st = os.stat(LIBSSL)
    assert function_offsets(LIBSSL, ["SSL_write"], (st.st_dev, st.st_ino))
    with pytest.raises(NotElf):
        function_offsets(LIBSSL, ["SSL_write"], (st.st_dev, st.st_ino + 1))


@pytest.mark.skipif(LIBSSL is None, reason="no libssl.so.3 here")
def test_one_symbol_table_of_each_kind_is_walked(tmp_path, monkeypatch):
    """An ELF has one .dynsym and one .symtab: a file whose 4,095 section headers all named
    one 64 MiB table had it walked 4,095 times (hours a file). Only the first is read."""
    from kmon.sources.tls import elf_symbols

    data = bytearray(Path(LIBSSL).read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shnum, = struct.unpack_from("<H", data, 0x3C)
    headers = [shoff + i * 64 for i in range(shnum)]
    dynsym = next(at for at in headers if struct.unpack_from("<I", data, at + 4)[0] == 11)
    strings = headers[struct.unpack_from("<I", data, dynsym + 40)[0]]
    for at in [at for at in headers[1:] if at not in (dynsym, strings)][:4]:
        data[at + 4:at + 64] = data[dynsym + 4:dynsym + 64]  # another .dynsym, the same
    path = tmp_path / "libssl.so.3"
    path.write_bytes(bytes(data))
    expected, walked = function_offsets(LIBSSL, ["SSL_write"]), []
    real = elf_symbols._symbols
    monkeypatch.setattr(elf_symbols, "_symbols", lambda *a: walked.append(1) or real(*a))
    assert function_offsets(str(path), ["SSL_write"]) == expected
    assert len(walked) == 1


def _load_base(path: str) -> int:
    real = str(Path(path).resolve())
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        if parts[-1] in (path, real) and parts[2] == "00000000":
            return int(parts[0].split("-")[0], 16)
    raise AssertionError(f"{path} not mapped")


def _file_offset(path: str, address: int) -> int:
    """``readelf``'s view of which loadable segment holds an address."""
    text = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True,
                          check=True).stdout
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "LOAD":
            offset, vaddr, filesz = int(parts[1], 16), int(parts[2], 16), int(parts[4], 16)
            if vaddr <= address < vaddr + filesz:
                return address - vaddr + offset
    raise AssertionError(hex(address))


def _loads(path: str) -> list[tuple[int, int]]:
    """``readelf``'s loadable segments: (file offset, address)."""
    text = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True,
                          check=True).stdout
    return [(int(parts[1], 16), int(parts[2], 16)) for line in text.splitlines()
            if (parts := line.split()) and parts[0] == "LOAD"]
