/* NVIDIA's management library (NVML), loaded at run time: what nvidia-smi and DCGM read about
 * a GPU (utilization, memory, temperature, power, clocks, ECC and XID errors), for acceld's
 * telemetry. Nothing links libnvidia-ml: be_nvml_open() dlopen()s "libnvidia-ml.so.1"
 * (ACCEL_NVML_LIBRARY names another file: the tests' fake), so every binary starts on a machine
 * without NVIDIA's driver and says why there is no telemetry.
 *
 * One user at a time (the telemetry thread): NVML itself is thread-safe, this table's open and
 * close are not. */
#ifndef BE_NVML_H
#define BE_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/attr.h"

/* What does not change while the GPU is there. */
typedef struct be_gpu_identity {
  char name[96];
  char uuid[96];       /* "GPU-...", as nvidia-smi -L prints it */
  char pci_bus_id[32]; /* "0000:3b:00.0": domain, bus, device, function in lower case */
} be_gpu_identity;

/* One reading. A field the GPU or driver does not report is -1 (has_* says which are real). */
typedef struct be_gpu_sample {
  int util_gpu_pct;  /* share of the last sample period a kernel ran (nvidia-smi's GPU-Util) */
  int util_mem_pct;  /* share of it device memory was read or written */
  int64_t mem_used;  /* bytes */
  int64_t mem_total; /* bytes */
  int temp_c;
  int64_t power_mw;
  int sm_clock_mhz, mem_clock_mhz;
  int64_t ecc_corrected, ecc_uncorrected; /* volatile counts, since the driver loaded */
} be_gpu_sample;

/* 0 and *count GPUs, or ACCEL_ENOTSUP with `why` ("libnvidia-ml.so.1: cannot open...",
 * "nvmlInit_v2: Driver Not Loaded"). Idempotent while open. */
RT_MUST_USE int be_nvml_open(unsigned *count, char *why, size_t why_len);
void be_nvml_close(void);
RT_MUST_USE int be_nvml_identity(unsigned index, be_gpu_identity *out);
/* 0, or an error when the GPU answers nothing at all (lost: ACCEL_EDEVLOST). */
RT_MUST_USE int be_nvml_sample(unsigned index, be_gpu_sample *out);
/* Whether XID errors (the driver's reports of GPU faults) can be counted: the event set. */
bool be_nvml_xids_watched(void);
/* The XID errors reported since the last call, without waiting: for each, the GPU's index and
 * the XID number; returns how many were stored (at most max). */
int be_nvml_xids_take(unsigned gpu[], uint64_t xid[], int max);

/* "0000:3B:00.0", "00000000:3b:00.0" -> "0000:3b:00.0" (what be_gpu_identity holds); false if
 * `in` is not a PCI address. */
bool be_pci_bus_id_normalize(const char *in, char *out, size_t out_len);

#endif
