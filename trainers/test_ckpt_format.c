/* trainers/test_ckpt_format.c: the sharded checkpoint format (ckpt.h) in this process,
 * on a tiny model's layout (2 layers, d 32) (weft issue 22).
 *
 * The shards four FSDP ranks write load back bit for bit into the shards of 1, 2, 3 and 4
 * ranks; a flipped byte in a shard or in the manifest, a truncated, missing or foreign
 * shard is refused naming the file; --resume of a directory picks the newest complete
 * checkpoint; --keep K removes only older checkpoints; an aborted temporary leaves the old
 * file; a shard that cannot be written, or that rank 0 cannot see (a directory that is not
 * shared), leaves its step without a manifest; the message of a rank that stops names the
 * newest checkpoint it knows complete. Needs no data and no programs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* cmocka.h needs the headers above first. */
#include <cmocka.h>

#include "trainers/atomic_file.h"
#include "trainers/blas_core.h"
#include "trainers/ckpt.h"
#include "trainers/fsdp_shard.h"
#include "trainers/test_util.h"

static const gpt_config tiny = {.vocab = 65, .seq = 16, .layers = 2, .dmodel = 32, .heads = 2};

/* ------------------------------------------------------------------ in-process fixture */

/* A tiny model's layout and a recognisable state: params, m, v of lay.total floats. */
typedef struct fixture {
  gpt_model *m;
  gpt_tokenizer tok;
  float *state[3];
  char root[64];
} fixture;

static fixture *fixture_new(void) {
  char err[256];
  fixture *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  f->m = gpt_model_create(&tiny, 1, gpt_backend_cpu(), err, sizeof(err));
  assert_non_null(f->m);
  unsigned char chars[65];
  for (int i = 0; i < 65; i++) chars[i] = (unsigned char)(' ' + i);
  gpt_tokenizer_from_chars(&f->tok, chars, 65);
  size_t n = f->m->lay.total;
  for (int b = 0; b < 3; b++) {
    f->state[b] = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) f->state[b][i] = (float)(b * 1000003 + i) * 0.001f + 0.5f;
  }
  snprintf(f->root, sizeof(f->root), "/tmp/test_ckpt.XXXXXX");
  tu_mkdtemp(f->root);
  return f;
}

static void fixture_free(fixture *f) {
  tu_rmdir(f->root);
  for (int b = 0; b < 3; b++) free(f->state[b]);
  gpt_model_free(f->m);
  free(f);
}

/* FSDP rank r of N's shards as segments (fsdp.c's plan_segments). */
static int fsdp_segments(const gpt_layout *lay, const fsdp_plan *p, int r, gpt_ckpt_seg *segs) {
  int n = 0;
  for (int u = 0; u < p->nunits; u++) {
    size_t lo, hi;
    fsdp_shard_range(p, lay, u, r, &lo, &hi);
    if (lo < hi) segs[n++] = (gpt_ckpt_seg){lo, p->local_off[u], hi - lo};
  }
  return n;
}

/* ROOT/step-S as N FSDP ranks write it, with the manifest unless shards_only. */
static void write_fsdp_checkpoint(const fixture *f, long step, int N, uint64_t id, int shards_only) {
  char dir[4200], path[4400], err[1024];
  const gpt_layout *lay = &f->m->lay;
  gpt_ckpt_step_dir(dir, sizeof(dir), f->root, step);
  assert_int_equal(gpt_mkdir_durable(dir, err, sizeof(err)), 0);
  gpt_ckpt_manifest man = {.id = id, .trainer = "test", .model = gpt_ckpt_model_gpt(&tiny, &f->tok, lay->total),
                           .step = step, .world = N, .global_batch = 8, .nshards = N};
  gpt_rng_seed(&man.rng, (uint64_t)step);
  man.shard = calloc((size_t)N, sizeof(*man.shard));
  for (int r = 0; r < N; r++) {
    fsdp_plan p;
    gpt_ckpt_seg segs[16];
    assert_int_equal(fsdp_plan_init(&p, lay, N, r), 0);
    float *local[3];
    for (int b = 0; b < 3; b++) {
      local[b] = malloc(fsdp_local_total(&p) * sizeof(float));
      fsdp_shard_copy_in(&p, lay, f->state[b], local[b]);
    }
    gpt_ckpt_local own = {{local[0], local[1], local[2]}, segs, fsdp_segments(lay, &p, r, segs)};
    gpt_ckpt_shard_name(man.shard[r].name, sizeof(man.shard[r].name), r, N, id);
    snprintf(path, sizeof(path), "%s/%s", dir, man.shard[r].name);
    gpt_ckpt_stamp s = gpt_ckpt_manifest_stamp(&man, r);
    if (gpt_ckpt_shard_write(path, &s, &own, &man.shard[r].info, err, sizeof(err))) fail_msg("%s", err);
    for (int b = 0; b < 3; b++) free(local[b]);
    fsdp_plan_free(&p);
  }
  if (!shards_only && gpt_ckpt_manifest_write(dir, &man, err, sizeof(err))) fail_msg("%s", err);
  free(man.shard);
}

static void step_path(char *out, size_t n, const fixture *f, long step, const char *file) {
  char dir[4200];
  gpt_ckpt_step_dir(dir, sizeof(dir), f->root, step);
  snprintf(out, n, "%s/%s", dir, file);
}

/* ROOT/step-S/shard-R-of-N.* */
static void shard_path(char *out, size_t n, const fixture *f, long step, int r, int N, uint64_t id) {
  char name[96];
  gpt_ckpt_shard_name(name, sizeof(name), r, N, id);
  step_path(out, n, f, step, name);
}

static void flip_byte(const char *path, long at) {
  FILE *fp = fopen(path, "r+b");
  assert_non_null(fp);
  fseek(fp, at, SEEK_SET);
  int c = fgetc(fp);
  fseek(fp, at, SEEK_SET);
  fputc(c ^ 0x5a, fp);
  fclose(fp);
}

/* Loading dir as FSDP rank r of M; returns the loader's status, err its message. */
static int load_as_fsdp(const fixture *f, const char *dir, int M, int r, float *local[3], char *err, size_t errlen) {
  gpt_ckpt_manifest man;
  if (gpt_ckpt_manifest_read(dir, &man, err, errlen)) return -1;
  fsdp_plan p;
  gpt_ckpt_seg segs[16];
  assert_int_equal(fsdp_plan_init(&p, &f->m->lay, M, r), 0);
  gpt_ckpt_local need = {{local[0], local[1], local[2]}, segs, fsdp_segments(&f->m->lay, &p, r, segs)};
  int rc = gpt_ckpt_load(dir, &man, &need, err, errlen);
  fsdp_plan_free(&p);
  gpt_ckpt_manifest_free(&man);
  return rc;
}

/* ------------------------------------------------------------------ format tests */

/* Each rank of 1..4 reads its shards of the 4-rank checkpoint: exactly what sharding the
 * original state for that rank count gives, padding zero, in all three buffers. */
static void shards_of_4_ranks_load_bit_for_bit_on_1_2_3_and_4_ranks(void **state) {
  fixture *f = fixture_new();
  const gpt_layout *lay = &f->m->lay;
  write_fsdp_checkpoint(f, 2, 4, 0x1234, 0);
  char dir[4200], err[1024];
  gpt_ckpt_step_dir(dir, sizeof(dir), f->root, 2);
  for (int M = 1; M <= 4; M++)
    for (int r = 0; r < M; r++) {
      fsdp_plan p;
      assert_int_equal(fsdp_plan_init(&p, lay, M, r), 0);
      size_t n = fsdp_local_total(&p);
      float *got[3], *want = malloc(n * sizeof(float));
      for (int b = 0; b < 3; b++) got[b] = calloc(n, sizeof(float));
      if (load_as_fsdp(f, dir, M, r, got, err, sizeof(err))) fail_msg("%d ranks, rank %d: %s", M, r, err);
      for (int b = 0; b < 3; b++) {
        fsdp_shard_copy_in(&p, lay, f->state[b], want);
        if (memcmp(got[b], want, n * sizeof(float))) fail_msg("%d ranks, rank %d: buffer %d differs", M, r, b);
        free(got[b]);
      }
      free(want);
      fsdp_plan_free(&p);
    }
  fixture_free(f);
}

/* What loading dir (as 2 ranks' rank 1, which needs parts of 3 of the 4 shards, and as
 * one rank, which needs all) says; asserts it fails naming `file` and saying `why`. */
static void expect_refused(const fixture *f, const char *dir, const char *file, const char *why) {
  char err[2048];
  float *local[3];
  for (int b = 0; b < 3; b++) local[b] = calloc(f->m->lay.total, sizeof(float));
  for (int M = 1; M <= 2; M++) {
    if (load_as_fsdp(f, dir, M, M - 1, local, err, sizeof(err)) == 0) fail_msg("%s loaded on %d ranks", dir, M);
    if (!strstr(err, file) || !strstr(err, why)) fail_msg("refused, but not naming %s (%s): %s", file, why, err);
  }
  print_message("# refused: %s\n", err);
  for (int b = 0; b < 3; b++) free(local[b]);
}

static void a_damaged_checkpoint_is_refused_naming_the_file(void **state) {
  fixture *f = fixture_new();
  char dir[4200], path[4400];
  for (long s = 2; s <= 10; s += 2) write_fsdp_checkpoint(f, s, 4, 0x1000 + (uint64_t)s, 0);
  gpt_ckpt_step_dir(dir, sizeof(dir), f->root, 2);
  shard_path(path, sizeof(path), f, 2, 2, 4, 0x1002);
  flip_byte(path, 3000); /* in the data */
  expect_refused(f, dir, "shard-00002-of-00004", "checksum mismatch");
  gpt_ckpt_step_dir(dir, sizeof(dir), f->root, 4);
  shard_path(path, sizeof(path), f, 4, 1, 4, 0x1004);
  assert_int_equal(truncate(path, 5000), 0);
  expect_refused(f, dir, "shard-00001-of-00004", "the manifest says");
  gpt_ckpt_step_dir(dir, sizeof(dir), f->root, 6);
  shard_path(path, sizeof(path), f, 6, 3, 4, 0x1006);
  assert_int_equal(unlink(path), 0);
  expect_refused(f, dir, "shard-00003-of-00004", "missing");
  gpt_ckpt_step_dir(dir, sizeof(dir), f->root, 8);
  step_path(path, sizeof(path), f, 8, "manifest");
  flip_byte(path, 40);
  expect_refused(f, dir, "step-00000008/manifest", "checksum mismatch");
  /* Step 10's shard 0 replaced by step 2's (same size, another save). */
  char cmd[9000], other[4400];
  shard_path(other, sizeof(other), f, 2, 0, 4, 0x1002);
  shard_path(path, sizeof(path), f, 10, 0, 4, 0x100a);
  snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", other, path);
  assert_int_equal(system(cmd), 0);
  gpt_ckpt_step_dir(dir, sizeof(dir), f->root, 10);
  expect_refused(f, dir, "shard-00000-of-00004", "belongs to another save");
  fixture_free(f);
}

static void expect_resolves(const char *path, const char *want_suffix) {
  char out[4200], err[2048];
  int is_file;
  if (gpt_ckpt_resolve(path, out, sizeof(out), &is_file, err, sizeof(err))) fail_msg("%s: %s", path, err);
  size_t n = strlen(out), k = strlen(want_suffix);
  if (n < k || strcmp(out + n - k, want_suffix)) fail_msg("%s resolved to %s, not ...%s", path, out, want_suffix);
  assert_int_equal(is_file, 0);
}

static void expect_unresolved(const char *path, const char *why) {
  char out[4200], err[2048];
  int is_file;
  if (gpt_ckpt_resolve(path, out, sizeof(out), &is_file, err, sizeof(err)) == 0) fail_msg("%s resolved", path);
  if (!strstr(err, why)) fail_msg("%s refused without saying %s: %s", path, why, err);
}

/* Steps 2 and 4 complete, 6 only shards (its save died before the manifest), 8 missing a
 * shard: the directory resumes step 4; naming 6 or 8 is refused, naming the file. */
static void resume_of_a_directory_picks_the_newest_complete_checkpoint(void **state) {
  fixture *f = fixture_new();
  char dir[4200], path[4400];
  write_fsdp_checkpoint(f, 2, 4, 0x2002, 0);
  write_fsdp_checkpoint(f, 4, 3, 0x2004, 0);
  write_fsdp_checkpoint(f, 6, 4, 0x2006, 1);
  write_fsdp_checkpoint(f, 8, 2, 0x2008, 0);
  shard_path(path, sizeof(path), f, 8, 1, 2, 0x2008);
  assert_int_equal(unlink(path), 0);
  expect_resolves(f->root, "/step-00000004");
  gpt_ckpt_step_dir(dir, sizeof(dir), f->root, 6);
  expect_unresolved(dir, "step-00000006/manifest: missing: incomplete checkpoint");
  gpt_ckpt_step_dir(dir, sizeof(dir), f->root, 8);
  expect_unresolved(dir, "shard-00001-of-00002");
  gpt_ckpt_step_dir(dir, sizeof(dir), f->root, 4);
  expect_resolves(dir, "/step-00000004");
  expect_unresolved("/nonexistent/weft/ckpt", "/nonexistent/weft/ckpt");
  fixture_free(f);
}

static int exists(const fixture *f, long step, const char *file) {
  char path[4400];
  step_path(path, sizeof(path), f, step, file);
  return access(path, F_OK) == 0;
}

/* Complete 1..5, incomplete 0 and 9, strays in 5: --keep 2 after step 5 leaves 4 and 5
 * (5 with only its manifest and shards) and the newer incomplete 9; --keep 0 keeps all. */
static void keep_2_removes_only_older_checkpoints_and_strays(void **state) {
  fixture *f = fixture_new();
  for (long s = 1; s <= 5; s++) write_fsdp_checkpoint(f, s, 2, 0x3000 + (uint64_t)s, 0);
  write_fsdp_checkpoint(f, 0, 2, 0x3100, 1);
  write_fsdp_checkpoint(f, 9, 2, 0x3109, 1);
  char path[4400], err[1024];
  const char *strays[] = {"manifest.tmp.4242", "shard-00000-of-00002.00000000deadbeef.tmp.4242",
                          "shard-00001-of-00002.00000000deadbeef"};
  for (int i = 0; i < 3; i++) {
    step_path(path, sizeof(path), f, 5, strays[i]);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fclose(fp);
  }
  assert_int_equal(gpt_ckpt_prune(f->root, 3, 0, err, sizeof(err)), 0);
  for (long s = 1; s <= 5; s++) assert_true(exists(f, s, "manifest"));
  if (gpt_ckpt_prune(f->root, 5, 2, err, sizeof(err))) fail_msg("%s", err);
  for (long s = 0; s <= 3; s++)
    if (exists(f, s, ".")) fail_msg("step %ld survived --keep 2", s);
  assert_true(exists(f, 4, "manifest") && exists(f, 5, "manifest") && exists(f, 9, "."));
  for (int i = 0; i < 3; i++)
    if (exists(f, 5, strays[i])) fail_msg("%s survived", strays[i]);
  char dir[4200];
  gpt_ckpt_manifest m;
  gpt_ckpt_step_dir(dir, sizeof(dir), f->root, 5);
  if (gpt_ckpt_check_complete(dir, &m, err, sizeof(err))) fail_msg("%s", err);
  gpt_ckpt_manifest_free(&m);
  fixture_free(f);
}

static void expect_content(const char *path, const char *want) {
  char buf[64] = "";
  FILE *fp = fopen(path, "r");
  assert_non_null(fp);
  size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
  fclose(fp);
  buf[n] = '\0';
  assert_string_equal(buf, want);
}

/* A file being replaced keeps its old content until the commit, and a temporary that is
 * aborted (or whose write failed) is gone. */
static void an_aborted_temporary_leaves_the_old_file(void **state) {
  fixture *f = fixture_new();
  char path[4200], err[512];
  snprintf(path, sizeof(path), "%s/state", f->root);
  gpt_afile a;
  assert_int_equal(gpt_afile_open(&a, path, err, sizeof(err)), 0);
  gpt_afile_write(&a, "old", 3);
  assert_int_equal(gpt_afile_commit(&a, err, sizeof(err)), 0);
  assert_int_equal(gpt_afile_open(&a, path, err, sizeof(err)), 0);
  gpt_afile_write(&a, "new", 3);
  expect_content(path, "old");
  gpt_afile_abort(&a);
  expect_content(path, "old");
  assert_true(access(a.tmp, F_OK) != 0);
  assert_int_equal(gpt_afile_open(&a, path, err, sizeof(err)), 0);
  gpt_afile_write(&a, "newer", 5);
  assert_int_equal(gpt_afile_commit(&a, err, sizeof(err)), 0);
  expect_content(path, "newer");
  assert_true(access(a.tmp, F_OK) != 0);
  fixture_free(f);
}

/* A save whose shard cannot be written writes no manifest: it fails saying which rank
 * could not create its shard, and the step stays incomplete. The shard fails here because its path (root + 52 bytes +
 * ".tmp.PID") is longer than PATH_MAX (4096) while the step directory's and the
 * manifest's temporary's are not (root + 14, root + 35). */
static void a_shard_that_cannot_be_written_leaves_no_manifest(void **state) {
  fixture *f = fixture_new();
  char root[4200], err[2048], probe[4400];
  snprintf(root, sizeof(root), "%s", f->root);
  for (size_t len; (len = strlen(root)) < 4040;) {
    size_t add = 4040 - len - 1 < 200 ? 4040 - len - 1 : 200;
    root[len] = '/';
    memset(root + len + 1, 'a', add);
    root[len + 1 + add] = '\0';
    assert_int_equal(gpt_mkdir_durable(root, err, sizeof(err)), 0);
  }
  gpt_ckpt_seg whole = {0, 0, f->m->lay.total};
  gpt_ckpt_save_req r = {.root = root, .keep = 2, .trainer = "test", .step = 1, .global_batch = 8,
                         .model = gpt_ckpt_model_gpt(&tiny, &f->tok, f->m->lay.total),
                         .own = {{f->state[0], f->state[1], f->state[2]}, &whole, 1}};
  gpt_ckpt_group one = {.rank = 0, .nranks = 1};
  gpt_ckpt_saved saved;
  assert_int_equal(gpt_ckpt_save(&one, &r, &saved, err, sizeof(err)), -1);
  print_message("# %.100s...\n", err);
  /* (The 4 KiB path itself fills the message, so the shard's name is cut off here.) */
  if (!strstr(err, "not written: rank 0: cannot create")) fail_msg("the save failed, but says: %.200s", err);
  snprintf(probe, sizeof(probe), "%s/manifest", saved.dir);
  assert_true(access(saved.dir, F_OK) == 0 && access(probe, F_OK) != 0);
  fixture_free(f);
}

/* A group in which this process is rank 0 of 2 and rank 1 reports a shard of 123 bytes
 * written somewhere rank 0 cannot see (another host's local disk). */
static int no_bcast(void *ctx, void *buf, size_t bytes, char *err, size_t errlen) { return 0; }

static int gather_from_elsewhere(void *ctx, const void *mine, void *all, size_t bytes, char *err, size_t errlen) {
  memcpy(all, mine, bytes);
  memcpy((char *)all + bytes, mine, bytes);
  memcpy((char *)all + bytes + 8, &(uint64_t){123}, 8); /* shard_report: ok, pad, then bytes */
  return 0;
}

static void a_shard_rank_0_cannot_see_leaves_no_manifest(void **state) {
  fixture *f = fixture_new();
  char err[2048], probe[4400];
  gpt_ckpt_seg half = {0, 0, f->m->lay.total / 2};
  gpt_ckpt_save_req r = {.root = f->root, .keep = 2, .trainer = "test", .step = 3, .global_batch = 8,
                         .model = gpt_ckpt_model_gpt(&tiny, &f->tok, f->m->lay.total),
                         .own = {{f->state[0], f->state[1], f->state[2]}, &half, 1}};
  gpt_ckpt_group two = {.rank = 0, .nranks = 2, .bcast = no_bcast, .gather = gather_from_elsewhere};
  gpt_ckpt_saved saved;
  assert_int_equal(gpt_ckpt_save(&two, &r, &saved, err, sizeof(err)), -1);
  if (!strstr(err, "does not see rank 1's shard") || !strstr(err, "shard-00001-of-00002") ||
      !strstr(err, "one shared filesystem"))
    fail_msg("%s", err);
  snprintf(probe, sizeof(probe), "%s/manifest", saved.dir);
  assert_true(access(probe, F_OK) != 0);
  fixture_free(f);
}

/* What gpt_ckpt_print_stop says for t. */
static void stop_message(const gpt_ckpt_track *t, char *out, size_t n) {
  FILE *fp = tmpfile();
  assert_non_null(fp);
  gpt_ckpt_print_stop(fp, t, "prog", 2);
  rewind(fp);
  size_t got = fread(out, 1, n - 1, fp);
  out[got] = '\0';
  fclose(fp);
}

static void expect_stop_names(const gpt_ckpt_track *t, long step, long steps_left) {
  char msg[9000], want[4400];
  stop_message(t, msg, sizeof(msg));
  snprintf(want, sizeof(want), "step-%08ld (step %ld); relaunch with --resume ", step, step);
  if (!strstr(msg, "prog: rank 2: stopped at step 9; last complete checkpoint: ") || !strstr(msg, want))
    fail_msg("expected step %ld named: %s", step, msg);
  snprintf(want, sizeof(want), "--steps %ld to end at step 20\n", steps_left);
  if (!strstr(msg, want)) fail_msg("expected '%s': %s", want, msg);
}

/* Step 4 complete (id 0x4004) and heard of; the failure came during step 8's save: if
 * rank 0 completed that one (its manifest has the id this rank was given), it is named,
 * else step 4. With nothing saved yet, the message says so. */
static void the_stop_message_names_the_save_rank_0_completed_before_the_failure(void **state) {
  fixture *f = fixture_new();
  write_fsdp_checkpoint(f, 4, 2, 0x4004, 0);
  write_fsdp_checkpoint(f, 8, 2, 0x4008, 0);
  long now = 9;
  gpt_ckpt_track t;
  gpt_ckpt_track_init(&t, f->root, 4, 2, NULL, &now, 11);
  char msg[9000];
  stop_message(&t, msg, sizeof(msg));
  if (!strstr(msg, "stopped at step 9; no checkpoint was written yet")) fail_msg("%s", msg);
  gpt_ckpt_saved saved = {.id = 0x4004};
  gpt_ckpt_step_dir(saved.dir, sizeof(saved.dir), f->root, 4);
  gpt_ckpt_saved_note(&t, &saved, 4, 1);
  expect_stop_names(&t, 4, 16);
  saved.id = 0x4008;
  gpt_ckpt_failed_note(&t, &saved, 8);
  expect_stop_names(&t, 8, 12);
  saved.id = 0x9999; /* a save of step 8 whose manifest never came: step 8 holds another save's */
  gpt_ckpt_failed_note(&t, &saved, 8);
  expect_stop_names(&t, 4, 16);
  fixture_free(f);
}

int main(int argc, char **argv) {
  /* The kernels the trainers it launches choose, so the in-process reference runs them too. */
  gpt_blas_choose(argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(shards_of_4_ranks_load_bit_for_bit_on_1_2_3_and_4_ranks),
      cmocka_unit_test(a_damaged_checkpoint_is_refused_naming_the_file),
      cmocka_unit_test(resume_of_a_directory_picks_the_newest_complete_checkpoint),
      cmocka_unit_test(keep_2_removes_only_older_checkpoints_and_strays),
      cmocka_unit_test(an_aborted_temporary_leaves_the_old_file),
      cmocka_unit_test(a_shard_that_cannot_be_written_leaves_no_manifest),
      cmocka_unit_test(a_shard_rank_0_cannot_see_leaves_no_manifest),
      cmocka_unit_test(the_stop_message_names_the_save_rank_0_completed_before_the_failure),
  };
  return cmocka_run_group_tests_name("test_ckpt_format", tests, NULL, NULL);
}
