/* trainers/ckpt_shard.c: a rank's shard file, written whole, read back into any segment map;
 * see ckpt_shard.h. */
#include "trainers/ckpt_shard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trainers/atomic_file.h"

#define SHARD_MAGIC "WEFTSHD1"
#define SHARD_VERSION 1

/* Floats read per fread while streaming a segment: 1 MiB. */
enum { CHUNK_FLOATS = 1 << 18 };

typedef struct shard_header {
  char magic[8];
  uint32_t version, header_bytes;
  uint64_t id;
  int32_t rank, nranks;
  int64_t step;
  uint64_t rng[4];
  uint64_t floats, nseg;
} shard_header;

typedef struct shard_seg {
  uint64_t full_off, len;
} shard_seg;

size_t gpt_ckpt_local_floats(const gpt_ckpt_local *l) {
  size_t n = 0;
  for (int i = 0; i < l->nseg; i++) n += l->seg[i].len;
  return n;
}

static shard_header header_of(const gpt_ckpt_stamp *s, int nseg) {
  shard_header h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, SHARD_MAGIC, 8);
  h.version = SHARD_VERSION;
  h.header_bytes = sizeof(h);
  h.id = s->id;
  h.rank = s->rank;
  h.nranks = s->nranks;
  h.step = s->step;
  memcpy(h.rng, s->rng.s, sizeof(h.rng));
  h.floats = s->floats;
  h.nseg = (uint64_t)nseg;
  return h;
}

int gpt_ckpt_shard_write(const char *path, const gpt_ckpt_stamp *s, const gpt_ckpt_local *own,
                         gpt_ckpt_file_info *info, char *err, size_t errlen) {
  gpt_afile a;
  if (gpt_afile_open(&a, path, err, errlen)) return -1;
  shard_header h = header_of(s, own->nseg);
  gpt_afile_write(&a, &h, sizeof(h));
  for (int i = 0; i < own->nseg; i++) {
    shard_seg sg = {own->seg[i].full_off, own->seg[i].len};
    gpt_afile_write(&a, &sg, sizeof(sg));
  }
  for (int b = 0; b < GPT_CKPT_NBUFS; b++)
    for (int i = 0; i < own->nseg; i++)
      gpt_afile_write(&a, own->buf[b] + own->seg[i].local_off, own->seg[i].len * sizeof(float));
  info->sum = a.sum;
  gpt_afile_write(&a, &info->sum, sizeof(info->sum));
  info->bytes = a.bytes;
  return gpt_afile_commit(&a, err, errlen);
}

/* ------------------------------------------------------------------ reading */

typedef struct shard_reader {
  const char *path;
  FILE *f;
  uint64_t sum;
  shard_header h;
  shard_seg *seg;
  float *chunk;
  char *err;
  size_t errlen;
} shard_reader;

static int reader_fail(shard_reader *r, const char *why) {
  snprintf(r->err, r->errlen, "checkpoint shard %s: %s", r->path, why);
  return -1;
}

static int read_hashed(shard_reader *r, void *p, size_t n) {
  if (fread(p, 1, n, r->f) != n) return reader_fail(r, "truncated (the file ends early)");
  r->sum = gpt_fnv1a(r->sum, p, n);
  return 0;
}

/* Header against the manifest's stamp; segments inside the full layout; the size the
 * table implies equal to the file's. */
static int check_header(shard_reader *r, const gpt_ckpt_stamp *want, uint64_t bytes) {
  const shard_header *h = &r->h;
  char why[256];
  if (memcmp(h->magic, SHARD_MAGIC, 8) || h->version != SHARD_VERSION || h->header_bytes != sizeof(*h))
    return reader_fail(r, "not a weft checkpoint shard (version 1)");
  if (h->id != want->id || h->rank != want->rank || h->nranks != want->nranks || h->step != want->step) {
    snprintf(why, sizeof(why),
             "belongs to another save (rank %d of %d, step %lld, id %016llx; the manifest expects rank %d of %d, "
             "step %ld, id %016llx)",
             h->rank, h->nranks, (long long)h->step, (unsigned long long)h->id, want->rank, want->nranks, want->step,
             (unsigned long long)want->id);
    return reader_fail(r, why);
  }
  if (h->floats != want->floats || h->nseg > (bytes / sizeof(shard_seg))) {
    snprintf(why, sizeof(why), "model of %llu floats with %llu segments; the manifest's has %llu floats",
             (unsigned long long)h->floats, (unsigned long long)h->nseg, (unsigned long long)want->floats);
    return reader_fail(r, why);
  }
  return 0;
}

static int read_table(shard_reader *r, uint64_t bytes) {
  r->seg = malloc((r->h.nseg ? r->h.nseg : 1) * sizeof(shard_seg));
  if (!r->seg) return reader_fail(r, "out of memory for its segment table");
  if (read_hashed(r, r->seg, r->h.nseg * sizeof(shard_seg))) return -1;
  uint64_t data = 0;
  for (uint64_t i = 0; i < r->h.nseg; i++) {
    if (r->seg[i].full_off > r->h.floats || r->seg[i].len > r->h.floats - r->seg[i].full_off)
      return reader_fail(r, "a segment lies outside the model");
    data += r->seg[i].len;
  }
  uint64_t want = sizeof(shard_header) + r->h.nseg * sizeof(shard_seg) + data * GPT_CKPT_NBUFS * 4 + 8;
  return want == bytes ? 0 : reader_fail(r, "its size does not match its segment table (corrupt)");
}

static int overlaps(const gpt_ckpt_local *need, uint64_t off, uint64_t len) {
  for (int k = 0; k < need->nseg; k++)
    if (need->seg[k].full_off < off + len && off < need->seg[k].full_off + need->seg[k].len) return 1;
  return 0;
}

/* Copies the part of chunk [off, off + n) (full layout) that need asks for into buffer b. */
static size_t copy_overlap(const gpt_ckpt_local *need, int b, uint64_t off, const float *chunk, size_t n) {
  size_t copied = 0;
  for (int k = 0; k < need->nseg; k++) {
    const gpt_ckpt_seg *s = &need->seg[k];
    uint64_t lo = off > s->full_off ? off : s->full_off;
    uint64_t hi = off + n < s->full_off + s->len ? off + n : s->full_off + s->len;
    if (lo >= hi) continue;
    memcpy(need->buf[b] + s->local_off + (lo - s->full_off), chunk + (lo - off), (hi - lo) * sizeof(float));
    copied += hi - lo;
  }
  return copied;
}

static int read_data(shard_reader *r, const gpt_ckpt_local *need, size_t *copied) {
  r->chunk = malloc(CHUNK_FLOATS * sizeof(float));
  if (!r->chunk) return reader_fail(r, "out of memory for its read buffer");
  for (int b = 0; b < GPT_CKPT_NBUFS; b++)
    for (uint64_t i = 0; i < r->h.nseg; i++)
      for (uint64_t done = 0; done < r->seg[i].len;) {
        size_t n = r->seg[i].len - done < CHUNK_FLOATS ? (size_t)(r->seg[i].len - done) : CHUNK_FLOATS;
        if (read_hashed(r, r->chunk, n * sizeof(float))) return -1;
        size_t c = copy_overlap(need, b, r->seg[i].full_off + done, r->chunk, n);
        if (b == 0) *copied += c;
        done += n;
      }
  uint64_t stored, computed = r->sum;
  if (fread(&stored, sizeof(stored), 1, r->f) != 1) return reader_fail(r, "truncated (no checksum)");
  return stored == computed ? 0 : reader_fail(r, "checksum mismatch: the file is corrupt");
}

static int open_checked(shard_reader *r, const gpt_ckpt_stamp *want, const gpt_ckpt_file_info *info) {
  struct stat sb;
  char why[160];
  r->f = fopen(r->path, "rb");
  if (!r->f) {
    snprintf(why, sizeof(why), "cannot open: %s (a shard of this checkpoint is missing)", strerror(errno));
    return reader_fail(r, why);
  }
  if (fstat(fileno(r->f), &sb) == 0 && (uint64_t)sb.st_size != info->bytes) {
    snprintf(why, sizeof(why), "%lld bytes, the manifest says %llu (truncated or replaced)", (long long)sb.st_size,
             (unsigned long long)info->bytes);
    return reader_fail(r, why);
  }
  if (read_hashed(r, &r->h, sizeof(r->h)) || check_header(r, want, info->bytes)) return -1;
  return read_table(r, info->bytes);
}

int gpt_ckpt_shard_read(const char *path, const gpt_ckpt_stamp *want, const gpt_ckpt_file_info *info,
                        const gpt_ckpt_local *need, size_t *copied, char *err, size_t errlen) {
  shard_reader r = {.path = path, .sum = GPT_FNV1A_INIT, .err = err, .errlen = errlen};
  int rc = open_checked(&r, want, info);
  int wanted = 0;
  for (uint64_t i = 0; rc == 0 && i < r.h.nseg && !wanted; i++) wanted = overlaps(need, r.seg[i].full_off, r.seg[i].len);
  if (rc == 0 && wanted) rc = read_data(&r, need, copied);
  if (rc == 0 && wanted && r.sum != info->sum) rc = reader_fail(&r, "checksum differs from the manifest's");
  if (r.f) fclose(r.f);
  free(r.seg);
  free(r.chunk);
  return rc;
}
