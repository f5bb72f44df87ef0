"""TVM 0.27 follows an error's message with the pass and the module's TVMScript, the failing node
underlined: the last line of the text is a row of carets or a line of code.  The zoo's evidence that
TVM cannot build a kernel was that last line ("ValueError: ^^^^^^^^"), and build failures showed code
instead of the cause.  The message is the text before ``Error in pass:`` / ``Location (TVMScript):``."""
import tvm
from tvm import s_tir
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.zoo_outcomes import tvm_compile_failure

CAUSE = "No matched reducer for the identity and the combiner of the reduction block"


@T.prim_func(s_tir=True)
def decaying_sum(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for i, k in T.grid(4, 8):
        with T.sblock("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                B[vi] = T.float32(0)
            B[vi] = B[vi] * T.float32(0.5) + A[vi, vk]


def _across_threads():
    """The reduction bound to threadIdx.x: no reducer TVM knows combines ``b * 0.5 + a``."""
    sch = s_tir.Schedule(decaying_sum)
    i, k = sch.get_loops(sch.get_sblock("B"))
    sch.bind(i, "blockIdx.x")
    sch.bind(k, "threadIdx.x")
    return sch.mod


def test_the_zoo_evidence_is_tvms_message_not_the_underlined_script():
    mod = _across_threads()
    try:
        tvm.compile(mod, target="cuda")
    except Exception as exc:  # noqa: BLE001 - what TVM says, as the independent truth
        text = str(exc)
    assert text.startswith(CAUSE) and text.rstrip().splitlines()[-1].strip().startswith("^")
    evidence = tvm_compile_failure(mod, tvm.target.Target("cuda"))
    assert evidence.startswith("TVM cannot build it: tvm.compile raises") and CAUSE in evidence, evidence


def test_a_build_failure_says_the_cause():
    hm = thn.build(_across_threads(), target="cuda", on_failure="keep")
    assert hm.failure is not None
    assert CAUSE in hm.failure.summary and "^^^" not in hm.failure.summary, hm.failure.summary
