"""Fast mode's dead-assignment removal (``codegen.pyast._drop_dead_assignments``): a chain of pure
assignments that only feed each other goes, whatever its order; a call with effects, a name read
elsewhere and a self-update stay; a loop body emptied keeps a ``pass``."""
import ast
import textwrap

from tvm_hybrid_nb.codegen.pyast import _drop_dead_assignments


def _dropped(source: str) -> str:
    module = ast.parse(textwrap.dedent(source))
    _drop_dead_assignments(module)
    return ast.unparse(module)


def test_a_chain_of_unread_pure_assignments_goes_from_its_end():
    got = _dropped("""
        def f(A, n):
            c = b * 2
            a = n + 1
            b = a - 1
            keep = n * 3
            A[0] = keep
    """)
    assert got == ast.unparse(ast.parse("def f(A, n):\n    keep = n * 3\n    A[0] = keep"))


def test_effects_reads_and_self_updates_stay():
    source = """
        def f(A, n):
            t = log(n)
            s = n
            for i in range(n):
                s = s + i
            u = np.arange(n).reshape(n, 1)
            A[0] = 1
    """
    got = _dropped(source)
    assert "t = log(n)" in got  # a call that may raise or have effects
    assert "s = s + i" in got and "s = n" in got  # s is read (by its own update)
    assert "u =" not in got  # np.arange(...).reshape(...) is pure


def test_an_emptied_loop_body_keeps_a_pass():
    got = _dropped("""
        def f(A, n):
            for i in range(n):
                x = i * 2
                y = x + 1
            A[0] = 1
    """)
    assert "for i in range(n):\n        pass" in got and "x =" not in got and "y =" not in got
