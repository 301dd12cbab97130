"""The kernel's TCP sockets: sock_diag dumps with tcp_info, /proc fds, sockstat, and the
TCP tracepoints."""
