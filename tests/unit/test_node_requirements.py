"""What a real node needs of the machine, named when it is missing (the node's tests skip
with exactly that list, on machines the README calls unsupported)."""

from pathlib import Path

from scidmz.testenv import node as real_node


def test_a_machine_without_what_a_node_needs_is_named(tmp_path: Path) -> None:
    """No overlayfs, no memory cgroup, not root: each is named, not skipped silently."""
    v1 = tmp_path / "v1"
    for controller in ("cpu", "pids"):
        (v1 / controller).mkdir(parents=True)
    gone = real_node.missing_features("nodev\tproc\nnodev\ttmpfs\n", v1, euid=1000)
    assert gone == [
        "root (containerd and the kubelet run as root)",
        "overlayfs (modprobe overlay)",
        f"cgroup controllers memory under {v1}",
    ]
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert real_node.missing_features("nodev\toverlay\n", v2, euid=0) == []
