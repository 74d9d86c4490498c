"""scripts/run_mpk_testmode_files.py: the two edits, and a run over a folder of CUDA-style files.

MPK's own files are not part of this repository; the files here are written for the test in the
way an MPK user writes them (device "cuda", torch.cuda.synchronize(), pk.run()).
"""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import run_mpk_testmode_files as runner  # noqa: E402

CUDA_STYLE = textwrap.dedent('''
    import sys
    import torch
    import mirage
    from mirage.mpk.persistent_kernel import PersistentKernel


    def test_identity_by_columns():
        device = "cuda"
        x = torch.randn(4, 64, device=device)
        out = torch.zeros(4, 64, device=device)
        workers, schedulers = mirage.get_configurations_from_gpu(0)
        params = PersistentKernel.get_default_init_parameters()
        params["test_mode"] = True
        params["num_workers"] = workers
        params["num_local_schedulers"] = schedulers
        pk = PersistentKernel(**params)
        x_dt, out_dt = pk.attach_input(x, name="x"), pk.attach_input(out, name="out")
        pk.identity_layer(x_dt, out_dt, (8, 1, 1), (128, 1, 1))
        pk.compile()
        pk.run()
        torch.cuda.synchronize()
        if not torch.equal(out, x):
            print("FAILED")
            sys.exit(1)
        pk.finalize()
        print("PASSED")


    if __name__ == "__main__":
        test_identity_by_columns()
''')


def test_to_cpu_changes_only_the_device_and_the_synchronize():
    text = 'device = "cuda"\nx = f(device="cuda")\n    torch.cuda.synchronize()\ny = "cuda"\nz.cuda()\n'
    assert runner.to_cpu(text) == 'device = "cpu"\nx = f(device="cpu")\n    pass\ny = "cuda"\nz.cuda()\n'


def test_runs_a_folder_and_reports_each_file(tmp_path):
    (tmp_path / "test_passes.py").write_text(CUDA_STYLE)
    (tmp_path / "test_fails.py").write_text('import sys\nprint("boom")\nsys.exit(3)\n')
    (tmp_path / "helper.py").write_text("raise SystemExit('not a test file: never run')\n")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "run_mpk_testmode_files.py"),
                           str(tmp_path), "--timeout", "120"], capture_output=True, text=True)
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 1
    lines = [line for line in proc.stdout.splitlines() if line.startswith("MPKFILE")]
    assert [line.split()[1:3] for line in lines] == [["test_fails.py", "FAIL"], ["test_passes.py", "PASS"]]
    assert "boom" in proc.stdout and "1 of 2 MPK test-mode files pass" in proc.stdout
