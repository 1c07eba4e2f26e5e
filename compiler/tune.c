/* Using a tuning cache at compile time (see tune.h): the template choice
 * with the tiles of the cache's records in place of the defaults. */
#include "compiler/tune.h"

#include <string.h>

#include "compiler/pipeline.h"
#include "runtime/device.h"

/* Device names go into a tab-separated line: anything outside printable
 * ASCII becomes '?', so the key read back equals the key written. */
static void printable(const char* s, char* dst, size_t cap) {
  size_t i = 0;
  for (; s && s[i] && i + 1 < cap; ++i) dst[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
  dst[i] = 0;
  if (!i) snprintf(dst, cap, "unknown");
}

void kiln_tune_device_of(kiln_device_t* dev, kiln_tune_device_t* out) {
  memset(out, 0, sizeof *out);
  out->target = dev->info.api;
  printable(dev->info.name, out->device, sizeof out->device);
  printable(dev->info.driver, out->driver, sizeof out->driver);
  kiln_compile_device_limits(&dev->info, &out->limits);
}

static void key_of(const kiln_template_t* t, const char* space, const kiln_tune_device_t* dev, kiln_tune_key_t* k) {
  memset(k, 0, sizeof *k);
  k->fingerprint = kiln_template_fingerprint(t);
  snprintf(k->target, sizeof k->target, "%s", dev->target);
  snprintf(k->space, sizeof k->space, "%s", space);
  snprintf(k->device, sizeof k->device, "%s", dev->device);
  snprintf(k->driver, sizeof k->driver, "%s", dev->driver);
  snprintf(k->kiln, sizeof k->kiln, "%s", KILN_VERSION);
}

/* One instance: its record's tiles when there is one for this key, the
 * constraints take them and they were faster. */
static void use_record(kiln_plan_t* plan, int32_t k, const kiln_template_set_t* set,
                       const kiln_tune_cache_t* cache, const kiln_tune_device_t* dev, FILE* log,
                       kiln_tune_use_report_t* r) {
  kiln_template_t* t = kiln_template_tunable_of(plan, k);
  kiln_template_space_t sp;
  if (!t || !set->space || !set->space(t, &sp)) return;
  r->instances++;
  kiln_tune_key_t key;
  key_of(t, sp.version, dev, &key);
  const kiln_tune_record_t* rec = kiln_tune_cache_find(cache, &key);
  if (!rec) {
    r->untuned++;
    const bool stale = kiln_tune_cache_find_near(cache, &key) != NULL;
    r->stale += stale;
    if (log)
      fprintf(log, "note: tuning: kernel '%s' (%s %016llx) untuned%s\n", plan->kernels[k].func->name,
              kiln_template_kind_name(t->kind), (unsigned long long)key.fingerprint,
              stale ? ": the cache's record is for another device, driver or kiln version (not trusted; "
                      "`kiln tune --resume` starts from it)"
                    : "");
    return;
  }
  const char* why = rec->tiles.n != t->tiles.n ? "its tile count differs from the template's"
                    : set->tiles_check          ? set->tiles_check(t, &rec->tiles, &dev->limits)
                                                : NULL;
  if (why) {
    r->refused++;
    if (log)
      fprintf(log, "warning: tuning: the record for kernel '%s' (%016llx) is refused: %s; default tiles\n",
              plan->kernels[k].func->name, (unsigned long long)key.fingerprint, why);
    return;
  }
  if (rec->tuned_us >= rec->default_us) { /* measured: the default was as fast */
    r->kept++;
    return;
  }
  t->tiles = rec->tiles;
  t->tuned_speedup = rec->default_us / rec->tuned_us;
  /* a point with its switch off puts the implicit-GEMM conv (Winograd) or
   * the printed kernel (depthwise) in */
  t = kiln_template_switch(plan, k);
  if (!t) {
    r->tuned++;
    if (log)
      fprintf(log, "note: tuning: kernel '%s' (%016llx) tuned: the printed kernel, %.2fx its default when measured\n",
              plan->kernels[k].func->name, (unsigned long long)key.fingerprint, rec->default_us / rec->tuned_us);
    return;
  }
  if (t->weights.layout != KILN_TEMPLATE_W_PACKED && set->weight_blocks) set->weight_blocks(t);
  r->tuned++;
  if (log) {
    char tiles[128];
    kiln_tune_tiles_format(&rec->tiles, tiles, sizeof tiles);
    fprintf(log, "note: tuning: kernel '%s' (%s %016llx) tuned: tiles %s, %.2fx its default when measured\n",
            plan->kernels[k].func->name, kiln_template_kind_name(t->kind), (unsigned long long)key.fingerprint, tiles,
            rec->default_us / rec->tuned_us);
  }
}

kiln_status_t kiln_tune_choose(kiln_plan_t* plan, const kiln_template_set_t* set, const kiln_tune_cache_t* cache,
                               const kiln_tune_device_t* dev, FILE* log, kiln_tune_use_report_t* out) {
  kiln_tune_use_report_t r;
  memset(&r, 0, sizeof r);
  KILN_RETURN_IF_ERROR(kiln_template_select(plan, set));
  for (int32_t k = 0; k < plan->n_kernels; ++k)
    if (plan->kernels[k].tmpl || plan->kernels[k].tmpl_off) use_record(plan, k, set, cache, dev, log, &r);
  kiln_status_t s = kiln_template_weights_lay_out(plan);
  if (s)
    for (int32_t k = 0; k < plan->n_kernels; ++k) plan->kernels[k].tmpl = NULL;
  if (out) *out = r;
  return s;
}

kiln_status_t kiln_tune_choose_file(kiln_plan_t* plan, const kiln_template_set_t* set, const char* path,
                                    kiln_device_t* dev, const char* target, int32_t threads, FILE* notes,
                                    kiln_tune_use_report_t* out) {
  memset(out, 0, sizeof *out);
  if (dev) {
    kiln_device_retain(dev);
  } else {
    kiln_device_open_options_t oo = {threads, true, NULL};
    kiln_status_t ds = kiln_device_open(target, &oo, kiln_allocator_system(), &dev);
    if (ds) {
      if (notes)
        fprintf(notes, "warning: tuning cache %s not used: no %s device to match its records (%s)\n", path, target,
                kiln_status_message(ds));
      kiln_status_free(ds);
      return kiln_template_choose(plan, set);
    }
  }
  kiln_tune_device_t where;
  kiln_tune_device_of(dev, &where);
  kiln_tune_cache_t cache = {0};
  kiln_status_t s = kiln_tune_cache_read(&cache, path, notes);
  if (!s) s = kiln_tune_choose(plan, set, &cache, &where, notes, out);
  if (!s && notes)
    fprintf(notes, "tuning: %d of %d template kernels tuned from %s (%d kept their defaults, %d untuned, %d refused, "
                   "%d cache lines ignored)\n",
            (int)out->tuned, (int)out->instances, path, (int)out->kept, (int)out->untuned, (int)out->refused,
            (int)cache.skipped);
  kiln_tune_cache_free(&cache);
  kiln_device_release(dev);
  return s;
}

kiln_status_t kiln_tune_mark_program(const kiln_plan_t* plan, kiln_program_t* prog) {
  /* Program kernel j runs the j-th plan kernel that is not MERGED where
   * the counts agree (a kernel whose code another's equals takes that
   * one's symbol: ResNet-18's layer4.1.conv1 as an implicit-GEMM conv is
   * k__conv1_Conv_2); else kernels are found by symbol. */
  int32_t kept = 0;
  for (int32_t k = 0; k < plan->n_kernels; ++k)
    kept += !(plan->kernels[k].tmpl && plan->kernels[k].tmpl->kind == KILN_TEMPLATE_MERGED);
  const bool by_order = kept == prog->n_kernels;
  for (int32_t k = 0, at = 0; k < plan->n_kernels; ++k) {
    const kiln_template_t* t = plan->kernels[k].tmpl; /* what runs (NULL: the printed kernel) */
    if (t && t->kind == KILN_TEMPLATE_MERGED) continue;
    const int32_t here = at++;
    const kiln_template_t* w = kiln_template_tunable_of(plan, k); /* the record's */
    if (!w || w->tuned_speedup <= 0) continue;
    const char* name = plan->kernels[k].func->name;
    for (int32_t j = by_order ? here : 0; j < (by_order ? here + 1 : prog->n_kernels); ++j) {
      kiln_program_kernel_t* pk = &prog->kernels[j];
      if ((!by_order && strcmp(pk->name, name)) || pk->tuned) continue;
      /* a Winograd point with the switch off: the Winograd record (the
       * cache's key) and the implicit-GEMM conv's tiles that ran */
      char tiles[128], conv[128] = "", text[384];
      kiln_tune_tiles_format(&w->tiles, tiles, sizeof tiles);
      if (!t) {
        snprintf(conv, sizeof conv, " (off: the printed kernel)");
      } else if (w != t) {
        char ct[96];
        kiln_tune_tiles_format(&t->tiles, ct, sizeof ct);
        snprintf(conv, sizeof conv, " (off: conv %s)", ct);
      }
      snprintf(text, sizeof text, "%s %s%s, %.2fx when measured, %016llx", kiln_template_kind_name(w->kind), tiles,
               conv, w->tuned_speedup, (unsigned long long)kiln_template_fingerprint(w));
      KILN_RETURN_IF_ERROR(kiln_program_strdup(prog, text, &pk->tuned));
    }
  }
  return NULL;
}
