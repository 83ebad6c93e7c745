// pybind11 module alf_env._penv: the native shared-memory engine.
//
// The surface is small on purpose; the friendly API lives in
// alf_env/data_plane/shared_block.py. Every call that can block releases the GIL and, while
// blocked, checks for pending Python signals after each sleep slice (so
// Ctrl-C interrupts a wait within ~50 ms without losing completions).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "controller.h"
#include "futex.h"
#include "job_slots.h"
#include "layout.h"
#include "openmp_park.h"
#include "protocol.h"
#include "region.h"
#include "row_copy.h"
#include "syscall_error.h"
#include "worker_port.h"

namespace py = pybind11;
using namespace alf_env::penv;

namespace {

// Runs (without the GIL) between sleep slices: raises pending Python
// signals, e.g. KeyboardInterrupt, out of the blocking call.
InterruptCheck python_signal_check() {
  return [] {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  };
}

double to_us(std::chrono::nanoseconds duration) {
  return std::chrono::duration<double, std::micro>(duration).count();
}

// Accepts a sequence of ints or an integer numpy array of worker ids.
std::vector<std::int64_t> to_ids(const py::handle& ids) {
  if (py::isinstance<py::array>(ids)) {
    auto array = py::reinterpret_borrow<py::array>(ids);
    const char kind = array.dtype().kind();
    if (kind != 'i' && kind != 'u') {
      throw py::type_error("worker ids must be integers, got an array of dtype " +
                           std::string(py::str(array.dtype())));
    }
    auto flat = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(array);
    if (!flat) throw py::error_already_set();
    return std::vector<std::int64_t>(flat.data(), flat.data() + flat.size());
  }
  return ids.cast<std::vector<std::int64_t>>();
}

// The workers among `ids` whose last finished job reported ERROR, as a list.
template <typename Ids>
py::list failed_among(const Controller& controller, const Ids& ids) {
  py::list failed;
  for (const auto id : ids) {
    if (controller.status(static_cast<std::size_t>(id)) == JobStatus::ERROR) {
      failed.append(id);
    }
  }
  return failed;
}

std::atomic<std::uint32_t>& word_at(SharedRegion& region, std::int64_t offset) {
  if (offset < 0 || offset % static_cast<std::int64_t>(sizeof(std::uint32_t)) != 0 ||
      static_cast<std::size_t>(offset) + sizeof(std::uint32_t) > region.size()) {
    throw std::invalid_argument(
        "offset must be a multiple of 4 inside the region (0 <= offset <= " +
        std::to_string(region.size() - sizeof(std::uint32_t)) + "), got " +
        std::to_string(offset));
  }
  return *reinterpret_cast<std::atomic<std::uint32_t>*>(region.data() + offset);
}

const char* futex_result_name(FutexWaitResult result) {
  switch (result) {
    case FutexWaitResult::kWoken: return "woken";
    case FutexWaitResult::kValueChanged: return "value_changed";
    case FutexWaitResult::kTimedOut: return "timed_out";
    case FutexWaitResult::kInterrupted: return "interrupted";
  }
  return "unknown";
}

}  // namespace

PYBIND11_MODULE(_penv, m) {
  m.doc() =
      "Native shared-memory engine of alf_env: memfd regions, block layout, "
      "lock-free job slots with futex waits. See alf_env/data_plane/shared_block.py.";
  m.attr("__version__") = kEngineVersion;
  m.attr("LAYOUT_VERSION") = kLayoutVersion;
  m.attr("CACHE_LINE_SIZE") = kCacheLineSize;
  m.attr("MAX_WORKERS") = kMaxWorkers;
  m.attr("SPIN_ADAPTIVE") = kSpinAdaptive;
  m.attr("TIMING_BUCKETS") = kTimingBuckets;

  // SyscallError -> OSError(errno, message) (or its errno subclass, e.g.
  // ProcessLookupError for ESRCH).
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const SyscallError& e) {
      py::object error = py::reinterpret_steal<py::object>(
          PyObject_CallFunction(PyExc_OSError, "is", e.error_number(), e.what()));
      if (!error) throw py::error_already_set();
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    }
  });

  py::enum_<JobType>(m, "JobType", "What a worker is asked to do.")
      .value("NONE", JobType::NONE, "No job (wait_job timed out).")
      .value("STEP", JobType::STEP, "Step with the action in your rows.")
      .value("RESET", JobType::RESET, "Reset.")
      .value("CALL", JobType::CALL,
             "A message waits on your pipe: handle it and report.")
      .value("CLOSE", JobType::CLOSE, "Leave the job loop.");
  py::enum_<JobStatus>(m, "JobStatus", "Outcome of a finished job.")
      .value("OK", JobStatus::OK)
      .value("ERROR", JobStatus::ERROR,
             "The worker's Python code raised; details travel on the pipe.");
  py::enum_<WaitStatus>(m, "WaitStatus", "Outcome of Controller.wait().")
      .value("OK", WaitStatus::OK, "k workers finished.")
      .value("TIMEOUT", WaitStatus::TIMEOUT,
             "The timeout passed; no ids returned, completions stay queued.")
      .value("WORKER_DIED", WaitStatus::WORKER_DIED,
             "A worker with an unfinished job died; its id is returned.");

  py::class_<SharedRegion, std::shared_ptr<SharedRegion>>(
      m, "SharedRegion", py::buffer_protocol(),
      "Anonymous shared memory (memfd + mmap(MAP_SHARED)); nothing in "
      "/dev/shm. Exposes a writable 1-D uint8 buffer; the mapping lives as "
      "long as this object or any view of it.")
      .def(py::init(&SharedRegion::create), py::arg("size"),
           "Creates a zero-filled region of `size` bytes.")
      .def_static("attach", &SharedRegion::attach, py::arg("fd"), py::arg("size"),
                  "Maps an existing region from its memfd `fd` (which is "
                  "duplicated: the caller still owns and closes `fd`).")
      .def_property_readonly("fd", &SharedRegion::fd,
                             "The region's memfd (owned by this object).")
      .def_property_readonly("size", &SharedRegion::size)
      .def_buffer([](SharedRegion& region) {
        return py::buffer_info(region.data(), sizeof(std::uint8_t),
                               py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(region.size())},
                               {static_cast<py::ssize_t>(1)},
                               /*readonly=*/false);
      })
      .def("__len__", &SharedRegion::size)
      .def("__repr__", [](const SharedRegion& region) {
        return "<SharedRegion fd=" + std::to_string(region.fd()) +
               " size=" + std::to_string(region.size()) + ">";
      });

  py::class_<FieldLayout>(m, "FieldLayout")
      .def_readonly("offset", &FieldLayout::offset)
      .def_readonly("row_stride", &FieldLayout::row_stride)
      .def_readonly("row_bytes", &FieldLayout::row_bytes)
      .def("__repr__", [](const FieldLayout& f) {
        return "FieldLayout(offset=" + std::to_string(f.offset) +
               ", row_stride=" + std::to_string(f.row_stride) +
               ", row_bytes=" + std::to_string(f.row_bytes) + ")";
      });
  py::class_<Layout>(m, "Layout")
      .def_readonly("num_workers", &Layout::num_workers)
      .def_readonly("num_rows", &Layout::num_rows)
      .def_readonly("control_size", &Layout::control_size)
      .def_readonly("total_size", &Layout::total_size)
      .def_readonly("fields", &Layout::fields)
      .def("__repr__", [](const Layout& l) {
        return "Layout(num_workers=" + std::to_string(l.num_workers) +
               ", num_rows=" + std::to_string(l.num_rows) +
               ", control_size=" + std::to_string(l.control_size) +
               ", total_size=" + std::to_string(l.total_size) + ", fields=" +
               std::to_string(l.fields.size()) + ")";
      });
  m.def("compute_layout", &compute_layout, py::arg("num_workers"),
        py::arg("num_rows"), py::arg("row_bytes"),
        "Offsets of the control block and of one array per field (each row "
        "padded to a multiple of CACHE_LINE_SIZE).");
  m.def("control_block_size", &ControlBlock::size_for, py::arg("num_workers"));

  py::class_<Controller>(m, "Controller",
                         "Main-process side: post jobs, receive the first k "
                         "finished workers, detect dead workers.")
      .def(py::init<std::shared_ptr<SharedRegion>, std::size_t, int, bool>(),
           py::arg("region").none(false), py::arg("num_workers"),
           py::arg("spin_us") = kSpinAdaptive, py::arg("workers_spread") = false)
      .def_property_readonly("num_workers", &Controller::num_workers)
      .def("set_worker_pid", &Controller::set_worker_pid, py::arg("worker"),
           py::arg("pid"),
           "Watches process `pid` as `worker` (pidfd); pid <= 0 stops.")
      .def(
          "post",
          [](Controller& controller, const py::handle& worker_ids, JobType job,
             std::int64_t arg) {
            std::vector<std::int64_t> ids = to_ids(worker_ids);
            py::gil_scoped_release release;
            controller.post(ids, job, arg);
          },
          py::arg("worker_ids"), py::arg("job"), py::arg("arg") = 0,
          "Posts `job` to each listed worker; ValueError (nothing posted) if "
          "an id is out of range, repeated or already busy.")
      .def(
          "wake_order",
          [](const Controller& controller, const py::handle& worker_ids) {
            return controller.wake_order(to_ids(worker_ids));
          },
          py::arg("worker_ids"),
          "The order post() would wake these workers from this thread now: "
          "those asleep on this thread's CPU last.")
      .def("sleep_cpu", &Controller::sleep_cpu, py::arg("worker"),
           "The CPU `worker` last went to sleep on (-1: not known yet).")
      .def(
          "wait",
          [](Controller& controller, std::int64_t k, std::optional<double> timeout_s) {
            if (k < 0) {
              throw std::invalid_argument("Controller.wait: k must be >= 0, got " +
                                          std::to_string(k));
            }
            const Deadline deadline = Deadline::after(timeout_s, "Controller.wait");
            Controller::WaitResult result;
            {
              py::gil_scoped_release release;
              result = controller.wait(static_cast<std::size_t>(k), deadline,
                                       python_signal_check());
            }
            py::array_t<std::int32_t> ids(static_cast<py::ssize_t>(result.workers.size()));
            std::copy(result.workers.begin(), result.workers.end(), ids.mutable_data());
            return py::make_tuple(result.status, ids);
          },
          py::arg("k"), py::arg("timeout_s") = py::none(),
          "Returns (WaitStatus, int32 array): OK with the first k finished "
          "workers in completion order; TIMEOUT with no ids (completions stay "
          "queued); WORKER_DIED with the dead workers' ids.")
      .def(
          "run",
          [](Controller& controller, const py::handle& worker_ids, JobType job,
             std::int64_t arg, std::optional<double> timeout_s) {
            // A lockstep step's post, wait and failed() in one call with one GIL
            // release: three calls into the module less on the hot path.
            const std::vector<std::int64_t> ids = to_ids(worker_ids);
            const Deadline deadline = Deadline::after(timeout_s, "Controller.run");
            Controller::WaitResult result;
            {
              py::gil_scoped_release release;
              result = controller.run(ids, job, arg, deadline, python_signal_check());
            }
            py::array_t<std::int32_t> finished(static_cast<py::ssize_t>(result.workers.size()));
            std::copy(result.workers.begin(), result.workers.end(), finished.mutable_data());
            return py::make_tuple(result.status, finished,
                                  result.status == WaitStatus::OK
                                      ? failed_among(controller, result.workers)
                                      : py::list());
          },
          py::arg("worker_ids"), py::arg("job"), py::arg("arg") = 0,
          py::arg("timeout_s") = py::none(),
          "post() then wait(len(worker_ids)) with nothing else outstanding "
          "(ValueError otherwise); returns wait()'s (WaitStatus, int32 array) "
          "and, on OK, the finished workers whose job reported ERROR (a list).")
      .def(
          "take_timings",
          [](Controller& controller) {
            const BatchTimings taken = controller.take_timings();
            py::array_t<std::uint64_t> buckets(
                {static_cast<py::ssize_t>(BatchTimings::kFigures),
                 static_cast<py::ssize_t>(kTimingBuckets)});
            std::uint64_t* out = buckets.mutable_data();
            for (const auto& figure : taken.buckets) {
              out = std::copy(figure.begin(), figure.end(), out);
            }
            return py::make_tuple(
                taken.count,
                py::make_tuple(taken.sum_ns[0], taken.sum_ns[1], taken.sum_ns[2]),
                buckets);
          },
          "(count, (wait, spread, hand-off sums in ns), uint64 array "
          "(3, TIMING_BUCKETS) of their histograms) of the lockstep batches "
          "since the last call; resets them.")
      .def("status", &Controller::status, py::arg("worker"))
      .def(
          "failed",
          [](const Controller& controller, const py::handle& worker_ids) {
            // One call instead of one status() per worker.
            return failed_among(controller, to_ids(worker_ids));
          },
          py::arg("worker_ids"),
          "The listed workers whose last finished job reported ERROR.")
      .def("outstanding", &Controller::outstanding, py::arg("worker"))
      .def_property_readonly("num_outstanding", &Controller::num_outstanding)
      .def("abandon", &Controller::abandon, py::arg("worker"),
           "Forgets the outstanding job of `worker`; returns whether it had one.")
      .def_property(
          "job_wait_spin_us", &Controller::job_wait_spin_us,
          [](Controller& controller, std::int64_t cap_us) {
            if (cap_us < 0 || cap_us > kMaxSpinUs) {
              throw std::invalid_argument(
                  "Controller.job_wait_spin_us: expected a cap in [0, " +
                  std::to_string(kMaxSpinUs) +
                  "] µs (0: the spin mode's own cap), got " + std::to_string(cap_us));
            }
            controller.set_job_wait_spin_us(static_cast<std::uint32_t>(cap_us));
          },
          "Cap (µs) of each worker's adaptive spin while it waits for its next "
          "job; 0 means the spin mode's own cap. Workers apply it at their next wait.")
      .def_property_readonly("spin_budget_us", [](const Controller& c) {
        return to_us(c.spin_budget());
      })
      .def_property_readonly("spin_yields_only", &Controller::spin_yields_only,
                             "Whether spinning only yields the core (more "
                             "processes than CPUs), never pauses on it.");

  py::class_<WorkerPort>(m, "WorkerPort", "Worker side of one job slot.")
      .def(py::init<std::shared_ptr<SharedRegion>, std::size_t, std::size_t, int, bool>(),
           py::arg("region").none(false), py::arg("num_workers"), py::arg("worker_index"),
           py::arg("spin_us") = kSpinAdaptive, py::arg("workers_spread") = false)
      .def(
          "wait_job",
          [](WorkerPort& port, std::optional<double> timeout_s) {
            const Deadline deadline = Deadline::after(timeout_s, "WorkerPort.wait_job");
            WorkerPort::Job job{};
            {
              py::gil_scoped_release release;
              job = port.wait_job(deadline, python_signal_check());
            }
            return py::make_tuple(job.type, job.arg);
          },
          py::arg("timeout_s") = py::none(),
          "Returns (JobType, arg); (JobType.NONE, 0) when the timeout passes.")
      .def(
          "finish",
          [](WorkerPort& port, JobStatus status) {
            py::gil_scoped_release release;
            port.finish(status, python_signal_check());
          },
          py::arg("status") = JobStatus::OK,
          "Reports the current job finished and wakes the main process.")
      .def_property_readonly("has_job", &WorkerPort::has_job)
      .def_property_readonly("worker_index", &WorkerPort::worker_index)
      .def_property_readonly("num_workers", &WorkerPort::num_workers)
      .def_property_readonly("spin_budget_us", [](const WorkerPort& p) {
        return to_us(p.spin_budget());
      })
      .def_property_readonly("spin_yields_only", &WorkerPort::spin_yields_only,
                             "Whether spinning only yields the core (more "
                             "processes than CPUs), never pauses on it.");

  py::class_<OpenMpPark>(m, "OpenMpPark",
                         "The calling thread's OpenMP pool threads asleep while a "
                         "step runs (see csrc/openmp_park.h).")
      .def(py::init<const std::string&>(), py::arg("runtime_path"))
      .def("park", &OpenMpPark::park, py::call_guard<py::gil_scoped_release>(),
           "Opens a parallel region in which every pool thread sleeps; returns "
           "whether it did (False: one thread, inside a region, or parked).")
      .def("release", &OpenMpPark::release, py::call_guard<py::gil_scoped_release>(),
           "Wakes the parked threads and closes the region.")
      .def_property_readonly("parked", &OpenMpPark::parked)
      .def("pool_cpu_ns", &OpenMpPark::pool_cpu_ns,
           "CPU ns of the pool threads the last park() put to sleep (-1: none "
           "parked yet, or one has ended since).")
      .def("pool_tids", &OpenMpPark::pool_tids,
           "Thread ids of the pool threads the last park() put to sleep (empty "
           "before each has parked once).");

  m.def("_copy_leaves", &copy_leaves, py::arg("dst"), py::arg("src"),
        py::arg("scalars") = false,
        "Copies src[i] into the row view dst[i] while src[i] is an ndarray of "
        "dst[i]'s shape and dtype (with scalars=True also while it is a "
        "scalar a 0-d row takes exactly: a Python float for a float64/float32 "
        "row, a Python bool for a bool row, a Python int in an integer row's "
        "range, a numpy scalar of the row's dtype); returns how many it "
        "copied (the rest need the caller's converting path).");

  py::module_ testing = m.def_submodule(
      "_testing", "Low-level hooks for the tests of alf_env._penv.");
  testing.def(
      "futex_wait",
      [](SharedRegion& region, std::int64_t offset, std::uint32_t expected,
         std::optional<double> timeout_s) {
        auto& word = word_at(region, offset);
        const Deadline deadline = Deadline::after(timeout_s, "futex_wait");
        std::optional<std::chrono::nanoseconds> timeout;
        if (!deadline.unlimited()) timeout = deadline.remaining(std::chrono::nanoseconds(0));
        FutexWaitResult result;
        {
          py::gil_scoped_release release;
          result = futex_wait(word, expected, timeout);
        }
        return std::string(futex_result_name(result));
      },
      py::arg("region"), py::arg("offset"), py::arg("expected"),
      py::arg("timeout_s") = py::none());
  testing.def(
      "futex_wake",
      [](SharedRegion& region, std::int64_t offset, int count) {
        return futex_wake(word_at(region, offset), count);
      },
      py::arg("region"), py::arg("offset"), py::arg("count") = 1);
  testing.def(
      "load_u32",
      [](SharedRegion& region, std::int64_t offset) {
        // seq_cst: test hook, simplest ordering.
        return word_at(region, offset).load(std::memory_order_seq_cst);
      },
      py::arg("region"), py::arg("offset"));
  testing.def(
      "store_u32",
      [](SharedRegion& region, std::int64_t offset, std::uint32_t value) {
        // seq_cst: test hook, simplest ordering.
        word_at(region, offset).store(value, std::memory_order_seq_cst);
      },
      py::arg("region"), py::arg("offset"), py::arg("value"));
  // A waiter's spin policy alone, to test how its adaptive budget moves.
  py::class_<SpinPolicy>(testing, "SpinPolicy")
      .def(py::init([](int spin_us, std::size_t num_processes, double cap_us) {
             return SpinPolicy(spin_us, num_processes, false,
                               std::chrono::nanoseconds(
                                   static_cast<std::int64_t>(cap_us * 1e3)));
           }),
           py::arg("spin_us"), py::arg("num_processes"), py::arg("cap_us") = 0.0)
      .def("fail",
           [](SpinPolicy& policy) {
             // A spin whose condition never holds: it fails (or spins not at all).
             return policy.spin([] { return false; }, std::chrono::seconds(1));
           })
      .def("record_wait",
           [](SpinPolicy& policy, double waited_us) {
             policy.record_wait(static_cast<std::int64_t>(waited_us * 1e3));
           },
           py::arg("waited_us"))
      .def_property_readonly("budget_us", [](const SpinPolicy& policy) {
        return to_us(policy.budget());
      });
  testing.def("usable_cpu_count", &usable_cpu_count);
  testing.def("timing_bucket", &timing_bucket, py::arg("ns"));
}
