"""A process's fd table is read again when the kernel's TCP events say it connected: a
socket put in a closed file's fd (the fd count and numbers as before, so no listing shows
it) joins the monitor's view within a poll or two of the connect, not at the next reading
of every link (REREAD_S, TOLD_REREAD_S)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from kmon.engine.kernel_watch import open_kernel_watch
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.sources.kernel.socket_readers import open_socket_reader

pytestmark = [pytest.mark.integration,  # a real child process, the kernel's real events
              pytest.mark.root(reason="the kernel's TCP events need root")]

# holds a connection and a file; at each line on stdin connects again, puts that socket in
# the file's fd and closes its own fd, then prints the socket's inode
MOVER = """
import os, socket, sys
broker = ('127.0.0.1', int(sys.argv[1]))
kept = socket.create_connection(broker)
held = open(os.devnull, 'rb')
print('ready', flush=True)
for _ in sys.stdin:
    conn = socket.create_connection(broker)
    os.dup2(conn.fileno(), held.fileno())
    conn.close()
    print(os.fstat(held.fileno()).st_ino, flush=True)
"""


def test_a_socket_in_a_closed_files_fd_joins_once_the_kernel_saw_its_process_connect():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        kernel, notice = open_kernel_watch([port])
        if kernel is None:
            pytest.skip(notice)
        child = subprocess.Popen([sys.executable, "-c", MOVER, str(port)], text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        monitor = None
        try:
            assert child.stdout.readline().strip() == "ready"
            sampler = ProcessSampler(child.pid, open_socket_reader(),
                                     SamplerSettings(require_kafka=False, wire="off"))
            monitor = Monitor([sampler], kernel=kernel)
            for _ in range(2):  # the second poll on: the kernel has said who connects
                monitor.poll()
            child.stdin.write("move\n")
            child.stdin.flush()
            moved = int(child.stdout.readline())
            inodes = []
            for _ in range(3):
                view = monitor.poll()[0].processes[0]
                inodes.append({conn.inode for conn in view.connections})
            assert moved in inodes[-1], (
                f"the moved socket (inode {moved}) never joined: {inodes}")
        finally:
            if monitor is not None:
                monitor.close()
            else:
                kernel.close()
            child.kill()
            child.wait()
