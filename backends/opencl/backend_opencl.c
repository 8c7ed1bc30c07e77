/* The opencl backend: every device of every OpenCL platform the ICD loader knows. This file
 * holds discovery, the device's life cycle, its faults and the ops table; device.h says how
 * the pieces fit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/error.h"
#include "backends/nvml/nvml.h"
#include "backends/opencl/backend_opencl.h"
#include "backends/opencl/device.h"
#include "runtime/alloc.h"

/* ---- discovery ------------------------------------------------------------------------ */

static void say(char *why, size_t why_len, const char *msg) {
  if (why != NULL && why_len > 0)
    snprintf(why, why_len, "%s", msg);
}

/* The platforms (caller frees *out): 0, or ACCEL_ENOTSUP when there are none. */
static int platforms(cl_platform_id **out, cl_uint *n) {
  *out = NULL;
  *n = 0;
  cl_uint np = 0;
  if (clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0)
    return ACCEL_ENOTSUP;
  cl_platform_id *p = rt_calloc(np, sizeof *p);
  if (p == NULL)
    return ACCEL_ENOMEM;
  if (clGetPlatformIDs(np, p, NULL) != CL_SUCCESS) {
    rt_free(p);
    return ACCEL_ENOTSUP;
  }
  *out = p;
  *n = np;
  return 0;
}

static cl_uint device_count(cl_platform_id p) {
  cl_uint nd = 0;
  return clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, NULL, &nd) == CL_SUCCESS ? nd : 0;
}

/* Device `index` counted across platforms in the loader's order; *count is the total. */
static int find_device(int index, int *count, cl_platform_id *plat, cl_device_id *dev) {
  cl_platform_id *p;
  cl_uint np;
  int rc = platforms(&p, &np);
  if (rc != 0)
    return rc;
  int total = 0;
  for (cl_uint i = 0; i < np; i++) {
    cl_uint nd = device_count(p[i]);
    if (index >= total && index < total + (int)nd && plat != NULL) {
      cl_device_id *ids = rt_calloc(nd, sizeof *ids);
      if (ids == NULL || clGetDeviceIDs(p[i], CL_DEVICE_TYPE_ALL, nd, ids, NULL) != CL_SUCCESS)
        rc = ids == NULL ? ACCEL_ENOMEM : ACCEL_EIO;
      else {
        *plat = p[i];
        *dev = ids[index - total];
      }
      rt_free(ids);
    }
    total += (int)nd;
  }
  rt_free(p);
  *count = total;
  return rc;
}

static int ocl_probe(int *count, char *why, size_t why_len) {
  if (count == NULL)
    return ACCEL_EINVAL;
  *count = 0;
  int n = 0, rc = find_device(-1, &n, NULL, NULL);
  if (rc == ACCEL_ENOTSUP)
    say(why, why_len, "no platform");
  if (rc != 0)
    return rc;
  if (n == 0) {
    say(why, why_len, "no device");
    return ACCEL_ENOTSUP;
  }
  *count = n;
  return 0;
}

/* ---- device info ---------------------------------------------------------------------- */

static void dev_string(cl_device_id id, cl_device_info what, char *buf, size_t len) {
  if (clGetDeviceInfo(id, what, len, buf, NULL) != CL_SUCCESS)
    buf[0] = '\0';
  buf[len - 1] = '\0';
}

static bool has_extension(cl_device_id id, const char *ext) {
  size_t len = 0;
  if (clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, 0, NULL, &len) != CL_SUCCESS || len == 0)
    return false;
  char *s = rt_malloc(len + 1);
  bool found = false;
  if (s != NULL && clGetDeviceInfo(id, CL_DEVICE_EXTENSIONS, len, s, NULL) == CL_SUCCESS) {
    s[len] = '\0';
    size_t n = strlen(ext);
    for (char *t = strstr(s, ext); t != NULL && !found; t = strstr(t + 1, ext))
      found = (t == s || t[-1] == ' ') && (t[n] == ' ' || t[n] == '\0');
  }
  rt_free(s);
  return found;
}

/* The device's PCI address, for telemetry: cl_khr_pci_bus_info, else NVIDIA's
 * cl_nv_device_attribute_query (its slot id packs the device number and the function as
 * hashcat and NVIDIA's samples read it). Empty when neither is there (PoCL, CPUs). */
#define PCI_BUS_INFO_KHR 0x410F
#define PCI_BUS_ID_NV 0x4008
#define PCI_SLOT_ID_NV 0x4009
#define PCI_DOMAIN_ID_NV 0x400A

static void fill_pci_bus_id(be_device *dev) {
  struct {
    cl_uint domain, bus, device, function;
  } k;
  cl_uint bus = 0, slot = 0, domain = 0;
  char text[32] = "";
  if (has_extension(dev->id, "cl_khr_pci_bus_info") &&
      clGetDeviceInfo(dev->id, PCI_BUS_INFO_KHR, sizeof k, &k, NULL) == CL_SUCCESS)
    snprintf(text, sizeof text, "%x:%x:%x.%x", k.domain, k.bus, k.device, k.function);
  else if (has_extension(dev->id, "cl_nv_device_attribute_query") &&
           clGetDeviceInfo(dev->id, PCI_BUS_ID_NV, sizeof bus, &bus, NULL) == CL_SUCCESS &&
           clGetDeviceInfo(dev->id, PCI_SLOT_ID_NV, sizeof slot, &slot, NULL) == CL_SUCCESS) {
    if (clGetDeviceInfo(dev->id, PCI_DOMAIN_ID_NV, sizeof domain, &domain, NULL) != CL_SUCCESS)
      domain = 0;
    snprintf(text, sizeof text, "%x:%x:%x.%x", domain, bus, (slot >> 3) & 0x1f, slot & 7);
  }
  if (!be_pci_bus_id_normalize(text, dev->info.pci_bus_id, sizeof dev->info.pci_bus_id))
    dev->info.pci_bus_id[0] = '\0';
}

static void fill_info(be_device *dev) {
  char plat[64] = "", name[96] = "";
  if (clGetPlatformInfo(dev->platform, CL_PLATFORM_NAME, sizeof plat, plat, NULL) != CL_SUCCESS)
    plat[0] = '\0';
  plat[sizeof plat - 1] = '\0';
  dev_string(dev->id, CL_DEVICE_NAME, name, sizeof name);
  snprintf(dev->info.name, sizeof dev->info.name, "%s: %s", plat, name);
  cl_ulong mem = 0;
  cl_uint units = 0;
  cl_device_type type = 0;
  size_t wg = 0;
  clGetDeviceInfo(dev->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
  clGetDeviceInfo(dev->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
  clGetDeviceInfo(dev->id, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  clGetDeviceInfo(dev->id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
  dev->info.mem_bytes = mem;
  dev->info.compute_units = units > 0 ? units : 1;
  dev->info.kind = (type & CL_DEVICE_TYPE_GPU)           ? BE_KIND_GPU
                   : (type & CL_DEVICE_TYPE_ACCELERATOR) ? BE_KIND_ACCELERATOR
                                                         : BE_KIND_CPU;
  dev->wg_max = wg > 0 ? wg : 1;
  dev->fp64 = has_extension(dev->id, "cl_khr_fp64");
  dev->fp16 = has_extension(dev->id, "cl_khr_fp16");
  cl_device_fp_config fp32 = 0;
  clGetDeviceInfo(dev->id, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp32, &fp32, NULL);
  dev->div_exact = (fp32 & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
  fill_pci_bus_id(dev);
}

static int ocl_info(be_device *dev, be_device_info *out) {
  if (dev == NULL || out == NULL)
    return ACCEL_EINVAL;
  *out = dev->info;
  return 0;
}

/* ---- faults --------------------------------------------------------------------------- */

void be_ocl_fault(be_device *dev) {
  atomic_store(&dev->lost, true);
}

bool be_ocl_gen_lost(be_device *dev, unsigned gen) {
  return atomic_load(&dev->lost) || atomic_load(&dev->gen) != gen;
}

int be_ocl_check(be_device *dev, cl_int err) {
  switch (err) {
  case CL_SUCCESS:
    return 0;
  case CL_OUT_OF_HOST_MEMORY:
  case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    return ACCEL_ENOMEM;
  case CL_OUT_OF_RESOURCES:
  case CL_DEVICE_NOT_AVAILABLE:
  case CL_INVALID_CONTEXT:
  case CL_INVALID_COMMAND_QUEUE:
  case CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST:
    be_ocl_fault(dev);
    return ACCEL_EDEVLOST;
  case CL_INVALID_VALUE:
  case CL_INVALID_BUFFER_SIZE:
  case CL_INVALID_MEM_OBJECT:
  case CL_MEM_COPY_OVERLAP:
  case CL_INVALID_WORK_GROUP_SIZE:
  case CL_INVALID_GLOBAL_WORK_SIZE:
    return ACCEL_EINVAL;
  default:
    return ACCEL_EIO;
  }
}

int be_ocl_wait(be_device *dev, cl_event ev) {
  cl_int st = CL_COMPLETE;
  cl_int err = clWaitForEvents(1, &ev);
  if (clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL) != CL_SUCCESS)
    st = err == CL_SUCCESS ? CL_COMPLETE : -1;
  if (st < 0) {
    be_ocl_fault(dev);
    return ACCEL_EDEVLOST;
  }
  return 0;
}

int be_ocl_queue_ok(be_queue *q) {
  if (q == NULL)
    return ACCEL_EINVAL;
  return be_ocl_gen_lost(q->dev, q->gen) ? ACCEL_EDEVLOST : 0;
}

static int ocl_status(be_device *dev) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  return atomic_load(&dev->lost) || dev->ctx == NULL ? ACCEL_EDEVLOST : 0;
}

/* OpenCL has no way to break a context on purpose: the device is marked lost, and work in
 * flight finishes but reports the loss (device.h). */
static int ocl_inject_fault(be_device *dev) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  if (!dev->fault_injection)
    return ACCEL_EPERM;
  be_ocl_fault(dev);
  return 0;
}

/* ---- incarnations, open and close ----------------------------------------------------- */

static int incarnate(be_device *dev) {
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)dev->platform, 0};
  cl_int err = CL_SUCCESS;
  dev->ctx = clCreateContext(props, 1, &dev->id, NULL, NULL, &err);
  if (dev->ctx == NULL)
    return err == CL_OUT_OF_HOST_MEMORY ? ACCEL_ENOMEM : ACCEL_EDEVLOST;
  int rc = be_ocl_program_load(dev);
  if (rc != 0) {
    clReleaseContext(dev->ctx);
    dev->ctx = NULL;
  }
  return rc;
}

static void dissolve(be_device *dev) {
  be_ocl_program_free(dev);
  if (dev->ctx != NULL)
    clReleaseContext(dev->ctx);
  dev->ctx = NULL;
}

void be_ocl_dev_ref(be_device *dev) {
  atomic_fetch_add_explicit(&dev->refs, 1, memory_order_relaxed);
}

void be_ocl_dev_unref(be_device *dev) {
  if (atomic_fetch_sub_explicit(&dev->refs, 1, memory_order_acq_rel) != 1)
    return;
  pthread_mutex_destroy(&dev->klock);
  pthread_mutex_destroy(&dev->lock);
  rt_free(dev->mems);
  rt_free(dev);
}

static be_device *dev_new(int index, const be_open_opts *opts) {
  be_device *dev = rt_calloc(1, sizeof *dev);
  if (dev == NULL)
    return NULL;
  atomic_init(&dev->refs, 1);
  atomic_init(&dev->lost, false);
  atomic_init(&dev->gen, 0);
  dev->index = index;
  dev->fault_injection = opts != NULL && opts->fault_injection != 0;
  pthread_mutex_init(&dev->klock, NULL);
  pthread_mutex_init(&dev->lock, NULL);
  rt_list_init(&dev->queues);
  return dev;
}

static int ocl_open(int index, const be_open_opts *opts, be_device **out) {
  if (out == NULL)
    return ACCEL_EINVAL;
  int count = 0;
  cl_platform_id plat = NULL;
  cl_device_id id = NULL;
  int rc = find_device(index, &count, &plat, &id);
  if (rc != 0)
    return rc;
  if (index < 0 || index >= count || id == NULL)
    return ACCEL_ENOENT;
  be_device *dev = dev_new(index, opts);
  if (dev == NULL)
    return ACCEL_ENOMEM;
  dev->platform = plat;
  dev->id = id;
  fill_info(dev);
  rc = incarnate(dev);
  if (rc != 0) {
    be_ocl_dev_unref(dev);
    return rc;
  }
  *out = dev;
  return 0;
}

static be_queue *first_queue(be_device *dev) {
  pthread_mutex_lock(&dev->lock);
  rt_list *l = dev->queues.next;
  pthread_mutex_unlock(&dev->lock);
  return l == &dev->queues ? NULL : (be_queue *)l;
}

/* Queues left open are destroyed (which waits for their work and calls their host
 * functions), then buffers left allocated are freed, then the context goes. */
/* Work ran past its deadline (a kernel that never ends). OpenCL cannot stop a running
 * kernel: the device is lost, and its queues and context are abandoned rather than waited
 * for (queue.c, ocl_close): the kernel runs on in the platform until it ends, holding what it
 * uses, and the device's next incarnation is a fresh context. */
static void ocl_abort(be_device *dev) {
  if (dev == NULL)
    return;
  atomic_store(&dev->aborted, true);
  be_ocl_fault(dev);
}

static void ocl_close(be_device *dev) {
  if (dev == NULL)
    return;
  be_queue *q;
  while ((q = first_queue(dev)) != NULL)
    be_ocl_queue_destroy(q);
  if (!atomic_load(&dev->aborted)) { /* else the runaway kernel may still use them */
    be_ocl_mem_free_all(dev);
    dissolve(dev);
  }
  be_ocl_dev_unref(dev);
}

/* Callers destroyed the old incarnation's queues and events (backend.h); its buffers keep
 * the old context alive until freed. */
static int ocl_reset(be_device *dev) {
  if (dev == NULL)
    return ACCEL_EINVAL;
  dissolve(dev);
  atomic_fetch_add(&dev->gen, 1);
  int rc = incarnate(dev);
  if (rc == 0)
    atomic_store(&dev->lost, false);
  return rc;
}

/* ---- beyond backend.h ----------------------------------------------------------------- */

void *be_opencl_context(be_device *dev) {
  return dev == NULL ? NULL : (void *)dev->ctx;
}

void *be_opencl_device_id(be_device *dev) {
  return dev == NULL ? NULL : (void *)dev->id;
}

void *be_opencl_queue(be_queue *q) {
  return q == NULL ? NULL : (void *)q->cq;
}

const be_ops be_opencl_ops = {
    .abi_version = BE_ABI_VERSION,
    .name = "opencl",
    .probe = ocl_probe,
    .open = ocl_open,
    .close = ocl_close,
    .info = ocl_info,
    .status = ocl_status,
    .reset = ocl_reset,
    .inject_fault = ocl_inject_fault,
    .abort = ocl_abort,
    .queue_create = be_ocl_queue_create,
    .queue_destroy = be_ocl_queue_destroy,
    .mem_alloc = be_ocl_mem_alloc,
    .mem_free = be_ocl_mem_free,
    .copy_h2d = be_ocl_copy_h2d,
    .copy_d2h = be_ocl_copy_d2h,
    .copy_d2d = be_ocl_copy_d2d,
    .host_register = NULL,
    .host_unregister = NULL,
    .event_create = be_ocl_event_create,
    .event_destroy = be_ocl_event_destroy,
    .event_record = be_ocl_event_record,
    .event_query = be_ocl_event_query,
    .event_sync = be_ocl_event_sync,
    .queue_wait = be_ocl_queue_wait,
    .host_callback = be_ocl_callback,
    .host_notify = be_ocl_notify,
    .sticky_errors = true, /* a command that fails faults the device (backend_opencl.c) */
    .late_callbacks = true,
    .any_thread = true, /* OpenCL calls are thread-safe; kernels' arguments are set under klock */
    .fill = be_ocl_fill,
    .blas = &be_opencl_blas,
    .rng = &be_opencl_rng,
    .nn = &be_opencl_nn,
    .module = &be_opencl_module,
};
