/* User kernels in the C API: loading modules, kernel handles, launches. Module and kernel
 * handles live in the buffers' table (ctx.c); a kernel handle is the client's alone (its
 * module's handle and its name), the session sees modules only. */
#include <stdlib.h>
#include <string.h>

#include "clients/ctx.h"
#include "ops/check.h"
#include "runtime/alloc.h"

int accel_module_load(accel_ctx *ctx, accel_device dev, accel_source source, const void *code,
                      size_t len, const char *options, accel_module *out, accel_future **f) {
  if (ctx == NULL || out == NULL || code == NULL || len == 0 || len > DEV_MODULE_MAX_CODE ||
      source < ACCEL_SOURCE_CUDA || source > ACCEL_SOURCE_SPIRV)
    return ACCEL_EINVAL;
  size_t olen = options ? strnlen(options, DEV_MODULE_MAX_OPTIONS + 1) : 0;
  if (olen > DEV_MODULE_MAX_OPTIONS)
    return ACCEL_EINVAL;
  if (dev != ACCEL_DEVICE_ANY && (dev < 0 || dev >= ctx->tp->device_count(ctx)))
    return ACCEL_EINVAL;
  /* The op carries copies of the code and options (the caller may free theirs now). */
  dev_call *call = rt_calloc(1, sizeof *call + len + olen + 1);
  if (call == NULL)
    return ACCEL_ENOMEM;
  dev_op *op = &call->op;
  char *copy = (char *)(call + 1);
  memcpy(copy, code, len);
  if (options)
    memcpy(copy + len, options, olen + 1);
  op->h.kind = DEV_OP_MODULE_LOAD;
  op->h.device = dev;
  op->u.module.source = source;
  op->u.module.code = copy;
  op->u.module.len = len;
  op->u.module.options = options ? copy + len : NULL;
  pthread_mutex_lock(&ctx->mu);
  int rc = client_handle_alloc_locked(ctx, CLIENT_H_MODULE, 0, 0, out);
  pthread_mutex_unlock(&ctx->mu);
  if (rc != 0) {
    rt_free(call);
    return rc;
  }
  op->nbufs = 1;
  op->bufs[0] = (dev_op_buf){.handle = *out};
  rc = dev_op_check_shape(op);
  if (rc == 0)
    rc = client_send(ctx, call, f); /* frees the call on failure */
  else
    rt_free(call);
  if (rc != 0) {
    pthread_mutex_lock(&ctx->mu);
    client_handle_free_locked(ctx, (uint32_t)*out);
    pthread_mutex_unlock(&ctx->mu);
  }
  return rc;
}

int accel_module_unload(accel_ctx *ctx, accel_module m) {
  if (ctx == NULL)
    return ACCEL_EINVAL;
  pthread_mutex_lock(&ctx->mu);
  client_handle *e = client_handle_entry(ctx, m, CLIENT_H_MODULE);
  pthread_mutex_unlock(&ctx->mu);
  if (e == NULL)
    return ACCEL_ESTALE;
  dev_call *call = rt_calloc(1, sizeof *call);
  if (call == NULL)
    return ACCEL_ENOMEM;
  dev_op *op = &call->op;
  op->h.kind = DEV_OP_MODULE_UNLOAD;
  op->h.device = ACCEL_DEVICE_ANY;
  op->nbufs = 1;
  op->bufs[0] = (dev_op_buf){.handle = m};
  int rc = client_send(ctx, call, NULL);
  if (rc != 0)
    return rc;
  pthread_mutex_lock(&ctx->mu);
  e = client_handle_entry(ctx, m, CLIENT_H_MODULE);
  for (uint32_t i = 0; e && i < e->nkernels; i++)
    client_handle_free_locked(ctx, e->kernels[i]);
  if (e)
    client_handle_free_locked(ctx, (uint32_t)m);
  pthread_mutex_unlock(&ctx->mu);
  return 0;
}

/* The module's kernel handle of that name, if it has one already (ctx->mu held). */
static bool kernel_known(accel_ctx *ctx, const client_handle *mod, const char *name,
                         accel_kernel *out) {
  for (uint32_t i = 0; i < mod->nkernels; i++) {
    client_handle *k = &ctx->handles[mod->kernels[i]];
    if (strcmp(k->name, name) == 0) {
      *out = (uint64_t)ctx->tag << 48 | (uint64_t)(k->gen & 0xffffu) << 32 | mod->kernels[i];
      return true;
    }
  }
  return false;
}

static int kernel_add(accel_ctx *ctx, uint64_t m, const char *name, accel_kernel *out) {
  client_handle *mod = client_handle_entry(ctx, m, CLIENT_H_MODULE);
  if (mod == NULL)
    return ACCEL_ESTALE;
  if (kernel_known(ctx, mod, name, out))
    return 0;
  uint32_t *ks = rt_realloc(mod->kernels, (mod->nkernels + 1) * sizeof *ks);
  char *copy = rt_strdup(name);
  if (ks)
    mod->kernels = ks;
  if (ks == NULL || copy == NULL) {
    rt_free(copy);
    return ACCEL_ENOMEM;
  }
  int rc = client_handle_alloc_locked(ctx, CLIENT_H_KERNEL, 0, 0, out);
  if (rc != 0) {
    rt_free(copy);
    return rc;
  }
  client_handle *k = &ctx->handles[(uint32_t)*out];
  k->module = m;
  k->name = copy;
  mod->kernels[mod->nkernels++] = (uint32_t)*out;
  return 0;
}

int accel_kernel_get(accel_ctx *ctx, accel_module m, const char *name, accel_kernel *out) {
  if (ctx == NULL || name == NULL || out == NULL)
    return ACCEL_EINVAL;
  size_t n = strnlen(name, BE_KERNEL_NAME_MAX + 1);
  if (n == 0 || n > BE_KERNEL_NAME_MAX)
    return ACCEL_EINVAL;
  pthread_mutex_lock(&ctx->mu);
  int rc = kernel_add(ctx, m, name, out);
  pthread_mutex_unlock(&ctx->mu);
  return rc;
}

/* ---- launches ---- */

static int add_arg(dev_op *op, const accel_arg *a) {
  dev_launch *l = &op->u.launch;
  dev_kernel_arg *d = &l->args[l->nargs++];
  switch (a->kind) {
  case ACCEL_ARG_BUFFER:
    if (op->nbufs == ACCEL_LAUNCH_MAX_BUFFERS)
      return ACCEL_EINVAL;
    *d = (dev_kernel_arg){BE_PARAM_BUFFER, 0, op->nbufs};
    op->bufs[op->nbufs++] = (dev_op_buf){
        .handle = a->buffer, .access = (uint32_t)a->access, .offset = a->offset, .count = a->count};
    return 0;
  case ACCEL_ARG_SCALAR:
    *d = (dev_kernel_arg){BE_PARAM_SCALAR, a->size, a->bits};
    return 0;
  case ACCEL_ARG_LOCAL:
    *d = (dev_kernel_arg){BE_PARAM_LOCAL, a->size, 0};
    return 0;
  default:
    return ACCEL_EINVAL;
  }
}

/* The kernel's module and name into the op (ACCEL_ESTALE once the module is unloaded). */
static int resolve_kernel(accel_ctx *ctx, accel_kernel k, dev_launch *l) {
  int rc = ACCEL_ESTALE;
  pthread_mutex_lock(&ctx->mu);
  client_handle *e = client_handle_entry(ctx, k, CLIENT_H_KERNEL);
  if (e && client_handle_entry(ctx, e->module, CLIENT_H_MODULE)) {
    l->module = e->module;
    memcpy(l->name, e->name, strlen(e->name) + 1);
    rc = 0;
  }
  pthread_mutex_unlock(&ctx->mu);
  return rc;
}

int accel_launch(accel_ctx *ctx, accel_device dev, accel_kernel k, const accel_launch_dims *dims,
                 const accel_arg *args, size_t nargs, accel_future **f) {
  if (ctx == NULL || dims == NULL || (args == NULL && nargs > 0) || nargs > ACCEL_LAUNCH_MAX_ARGS)
    return ACCEL_EINVAL;
  dev_call *call = rt_calloc(1, sizeof *call);
  if (call == NULL)
    return ACCEL_ENOMEM;
  dev_op *op = &call->op;
  op->h.kind = DEV_OP_LAUNCH;
  op->h.deadline_ms = dims->timeout_ms;
  dev_launch *l = &op->u.launch;
  int rc = resolve_kernel(ctx, k, l);
  for (size_t i = 0; i < nargs && rc == 0; i++)
    rc = add_arg(op, &args[i]);
  if (rc != 0) {
    rt_free(call);
    return rc;
  }
  memcpy(l->grid, dims->grid, sizeof l->grid);
  memcpy(l->block, dims->block, sizeof l->block);
  l->shared_bytes = dims->shared_bytes;
  return client_submit(ctx, call, dev, f);
}
