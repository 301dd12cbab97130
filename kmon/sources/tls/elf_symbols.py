"""Where named functions sit in an ELF file: the file offset a uprobe takes, from the file's
``.dynsym`` and ``.symtab`` (a statically linked OpenSSL, as in the confluent-kafka wheels'
librdkafka, is only in ``.symtab``); and where named data objects sit in memory (a Go
program's interface tables, in ``.symtab``).

The file is the watched process's: hostile. Every read is bounded (the section table, each
symbol table and its strings) and inside the file, the first symbol table of each kind is
all that is walked, and a 64-bit little-endian ELF is all that is read.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Collection

MAX_SECTIONS = 4096
MAX_TABLE_BYTES = 64 << 20  # one symbol table, or its strings, read at most
CHUNK = 1 << 20
ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
SECTION = struct.Struct("<IIQQQQIIQQ")
SEGMENT = struct.Struct("<IIQQQQQQ")
SYMBOL = struct.Struct("<IBBHQQ")
SHT_SYMTAB, SHT_DYNSYM, PT_LOAD, STT_OBJECT, STT_FUNC, SHN_UNDEF = 2, 11, 1, 1, 2, 0


class NotElf(Exception):
    """The file is not an ELF kmon reads (not 64-bit little-endian, or cut short)."""


def function_offsets(path: str, names: Collection[str],
                     ident: tuple[int, int] | None = None) -> dict[str, int]:
    """The file offset of each of ``names`` that the file defines as a function (``ident``:
    the (device, inode) the file must be)."""
    found, loads = _defined(path, names, STT_FUNC, ident)
    return {name: offset for name, address in found.items()
            if (offset := _file_offset(address, loads)) is not None}


def object_addresses(path: str, names: Collection[str],
                     ident: tuple[int, int] | None = None) -> tuple[dict[str, int], int]:
    """The virtual address of each of ``names`` that the file defines as a data object, and
    the lowest address it loads at (what a mapping of its offset 0 starts at, once
    relocated): an object's place in a process is its address plus that mapping's start
    less this."""
    found, loads = _defined(path, names, STT_OBJECT, ident)
    lowest = min((vaddr - offset for _t, _f, offset, vaddr, *_ in loads), default=0)
    return found, lowest


def _defined(path: str, names: Collection[str], kind: int,
             ident: tuple[int, int] | None) -> tuple[dict[str, int], list]:
    """The address of each of ``names`` the file defines as a symbol of ``kind``, and its
    loadable segments. Opened without blocking or following a last link, and read only if
    a regular file (and ``ident``, where given): the path is the process's to swap for a
    FIFO between the look at its maps and this open."""
    wanted = {name.encode() for name in names}
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or ident not in (None, (st.st_dev, st.st_ino)):
            raise NotElf(f"{path}: not the regular file mapped")
        size = st.st_size
        header = _read(fd, 0, ELF_HEADER.size, size)
        (ident_bytes, _type, _machine, _version, _entry, phoff, shoff, _flags, _ehsize,
         phentsize, phnum, shentsize, shnum, _shstrndx) = ELF_HEADER.unpack(header)
        if ident_bytes[:4] != b"\x7fELF" or ident_bytes[4] != 2 or ident_bytes[5] != 1:
            raise NotElf(path)
        if shentsize != SECTION.size or phentsize != SEGMENT.size or shnum > MAX_SECTIONS:
            raise NotElf(path)
        sections = list(SECTION.iter_unpack(_read(fd, shoff, shnum * SECTION.size, size)))
        loads = [s for s in SEGMENT.iter_unpack(_read(fd, phoff, phnum * SEGMENT.size, size))
                 if s[0] == PT_LOAD]
        found: dict[bytes, int] = {}
        for table in (SHT_DYNSYM, SHT_SYMTAB):  # an ELF has one of each: the first is read
            section = next((s for s in sections if s[1] == table), None)
            if section is not None and section[6] < len(sections):
                _symbols(fd, size, section, sections[section[6]], wanted, kind, found)
        return {name.decode(): address for name, address in found.items()}, loads
    finally:
        os.close(fd)


def _symbols(fd: int, size: int, table: tuple, strings: tuple, wanted: set[bytes], kind: int,
             found: dict[bytes, int]) -> None:
    """The defined symbols of ``kind`` among ``wanted`` in one symbol table, into ``found``."""
    offset, length = table[4], table[5]
    str_offset, str_length = strings[4], strings[5]
    if not (_inside(offset, length, size) and _inside(str_offset, str_length, size)):
        return
    names = _read(fd, str_offset, str_length, size)
    longest = max(map(len, wanted)) + 1
    for at in range(offset, offset + length - length % SYMBOL.size, CHUNK):
        chunk = _read(fd, at, min(CHUNK, offset + length - at) // SYMBOL.size * SYMBOL.size,
                      size)
        for name_at, info, _other, shndx, value, _size in SYMBOL.iter_unpack(chunk):
            if info & 0xF != kind or shndx == SHN_UNDEF or value == 0:
                continue
            name = names[name_at:name_at + longest].split(b"\0", 1)[0]
            if name in wanted:
                found.setdefault(name, value)


def _file_offset(address: int, loads: list[tuple]) -> int | None:
    """The file offset of a virtual address, by the loadable segment that holds it."""
    for _type, _flags, offset, vaddr, _paddr, filesz, _memsz, _align in loads:
        if vaddr <= address < vaddr + filesz:
            return address - vaddr + offset
    return None


def _inside(offset: int, length: int, size: int) -> bool:
    return offset >= 0 and 0 < length <= MAX_TABLE_BYTES and offset + length <= size


def _read(fd: int, offset: int, length: int, size: int) -> bytes:
    """``length`` bytes at ``offset`` of a file of ``size`` bytes, all inside it."""
    if length > MAX_TABLE_BYTES:
        raise NotElf("a table larger than kmon reads")
    if not 0 <= offset <= size - length:
        raise NotElf("a table outside the file")
    data = os.pread(fd, length, offset)
    if len(data) != length:
        raise NotElf("cut short")
    return data
