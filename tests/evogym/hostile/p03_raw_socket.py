"""P3: the C twin `_socket` and a raw socket(2) syscall through ctypes."""
import ctypes


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        report = {}
        try:
            import _socket
            _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
            report["_socket"] = "created"
        except OSError as exc:
            report["_socket_error"] = exc.errno
        libc = ctypes.CDLL(None, use_errno=True)
        report["syscall_rc"] = libc.syscall(41, 2, 1, 0)  # socket(AF_INET, SOCK_STREAM, 0)
        report["syscall_errno"] = ctypes.get_errno()
        return report
