"""Installation: `cmake --install build --prefix P`, then the README's main job run from P alone
(the installed Makefile.examples, tools from P/bin, no source or build tree), and a 20-line
program built against the installed tree with find_package(mbkit)."""

import gzip
import os
import re
import shutil
import subprocess
import tempfile
import textwrap

import h5py
import numpy as np

import mbtest

BUILD_DIR = os.path.dirname(mbtest.BIN_DIR)

PROGRAM = textwrap.dedent("""\
    // Counts the labels of a dataset file's training split through libmbkit-core.
    #include <cstdio>
    #include <map>

    #include "mbkit/data/dataset_file.hpp"
    #include "mbkit/util/version.hpp"

    int main(int argc, char** argv) {
      if (argc != 2) return 2;
      const auto file = mbkit::data::DatasetFile::open(argv[1]);
      const auto& info = file.info();
      std::map<int, int> counts;
      for (const int label : file.read_labels("train")) ++counts[label];
      std::printf("mbkit %s: %s, %d classes, %d x %d x %d\\n", mbkit::version().c_str(),
                  info.name.c_str(), info.num_classes, info.shape().channels,
                  info.shape().height, info.shape().width);
      for (const auto& [label, count] : counts) std::printf("%d %d\\n", label, count);
    }
    """)

CMAKELISTS = textwrap.dedent("""\
    cmake_minimum_required(VERSION 3.22)
    project(count_labels LANGUAGES CXX)
    set(CMAKE_CXX_STANDARD 20)
    find_package(mbkit 0.1 REQUIRED)
    add_executable(count_labels count_labels.cpp)
    target_link_libraries(count_labels PRIVATE mbkit::core)
    """)


class Install(mbtest.ToolTestCase):
    @classmethod
    def setUpClass(cls):
        cls.prefix_root = tempfile.mkdtemp(prefix="mbkit-install-")
        cls.addClassCleanup(shutil.rmtree, cls.prefix_root, ignore_errors=True)
        cls.prefix = os.path.join(cls.prefix_root, "p")
        result = mbtest.run(["cmake", "--install", BUILD_DIR, "--prefix", cls.prefix])
        if result.rc != 0:
            raise RuntimeError(f"cmake --install failed\n{result!r}")

    def installed_env(self):
        """PATH with the installed tools and the system's, nothing of the build tree."""
        env = dict(self.env)
        env["PATH"] = os.pathsep.join([os.path.join(self.prefix, "bin"), "/usr/local/bin",
                                       "/usr/bin", "/bin"])
        for name in ("MBKIT_BIN_DIR", "MBKIT_SOURCE_DIR", "LD_LIBRARY_PATH"):
            env.pop(name, None)
        return env

    def test_installed_tree_depends_on_nothing_of_the_build(self):
        cores = [os.path.join(root, name) for root, _, names in os.walk(self.prefix)
                 for name in names if re.fullmatch(r"libmbkit-core\.so\.\d+", name)]
        self.assertEqual(len(cores), 1, cores)
        libdir = os.path.relpath(os.path.dirname(cores[0]), self.prefix)
        for tool in ("mb", "mb-dataset", "mb-train-fmb", "mb-train-amb", "mb-eval", "mb-plot",
                     "mb-report"):
            path = os.path.join(self.prefix, "bin", tool)
            self.assertTrue(os.access(path, os.X_OK), path)
            dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True).stdout
            runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[(.*)\]",
                                 dynamic)
            self.assertEqual(runpath, [f"$ORIGIN/../{libdir}"], msg=dynamic)
            ldd = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
            core = re.search(r"libmbkit-core\.so\.\d+ => (\S+)", ldd)
            self.assertIsNotNone(core, msg=ldd)
            self.assertEqual(os.path.realpath(core.group(1)), os.path.realpath(cores[0]))
        for page in ("man1/mb-train-fmb.1", "man5/mbkit-formats.5", "man7/mbkit.7"):
            installed = os.path.join(self.prefix, "share", "man", page + ".gz")
            with gzip.open(installed, "rt") as f, open(os.path.join(mbtest.SOURCE_DIR, "man",
                                                                   os.path.basename(page))) as src:
                self.assertEqual(f.read(), src.read(), page)
        for script in ("fmb.sbatch", "amb.sbatch", "dbsl.sbatch", "bandwidth.sbatch"):
            self.assertTrue(os.path.isfile(os.path.join(self.prefix, "share", "mbkit", "slurm",
                                                        script)), script)

    def test_main_job_from_the_installed_tree(self):
        # A folder of its own: no build/bin below it, so the installed Makefile.examples takes
        # the tools from PATH, i.e. from the prefix.
        work = self.path("work")
        os.mkdir(work)
        makefile = os.path.join(self.prefix, "share", "mbkit", "examples", "Makefile.examples")
        env = self.installed_env()
        self.assertFalse(os.path.exists(os.path.join(work, "build")))
        result = mbtest.run(["make", "-f", makefile, "quickstart", "THREADS=2"], cwd=work,
                            env=env, timeout=600)
        self.assertSucceeded(result)
        for tool in ("mb-dataset", "mb-train-fmb", "mb-train-amb", "mb-eval", "mb-plot",
                     "mb-report"):
            self.assertEqual(shutil.which(tool, path=env["PATH"]),
                             os.path.join(self.prefix, "bin", tool))
        quick = os.path.join(work, "out", "quick")
        for name in ("fmb", "amb"):
            with h5py.File(os.path.join(quick, f"{name}-eval.h5"), "r") as f:
                self.assertGreater(mbtest.text_attrs(f)["accuracy"], 0.75)
        with open(os.path.join(quick, "time-to-accuracy.txt")) as f:
            summary = f.read()
        self.assertRegex(summary, r"# seed 1: mb-train-amb / mb-train-fmb time to 80%: [0-9.]+ ")

    def test_find_package_builds_a_program_against_the_installed_tree(self):
        source = self.path("src")
        os.mkdir(source)
        with open(os.path.join(source, "count_labels.cpp"), "w") as f:
            f.write(PROGRAM)
        with open(os.path.join(source, "CMakeLists.txt"), "w") as f:
            f.write(CMAKELISTS)
        build = self.path("build")
        configure = mbtest.run(["cmake", "-S", source, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                                f"-DCMAKE_PREFIX_PATH={self.prefix}"], env=self.env, timeout=120)
        self.assertSucceeded(configure)
        compiled = mbtest.run(["cmake", "--build", build], env=self.env, timeout=300)
        self.assertSucceeded(compiled)
        data = self.path("toy.h5")
        self.assertSucceeded(mbtest.run([os.path.join(self.prefix, "bin", "mb-dataset"), "synth",
                                         "toy", "--train", "500", "--test", "50", "-o", data],
                                        env=self.installed_env()))
        result = mbtest.run([os.path.join(build, "count_labels"), data], env=self.installed_env())
        self.assertSucceeded(result)
        with h5py.File(data, "r") as f:
            labels = f["train/labels"][...]
            attrs = mbtest.text_attrs(f)
            shape = f["train/images"].shape
        lines = result.out.splitlines()
        self.assertEqual(lines[0], f"mbkit 0.1.0: {attrs['name']}, {int(attrs['num_classes'])} "
                                   f"classes, {shape[1]} x {shape[2]} x {shape[3]}")
        values, counts = np.unique(labels, return_counts=True)
        self.assertEqual(lines[1:], [f"{v} {c}" for v, c in zip(values, counts)])


if __name__ == "__main__":
    mbtest.main()
