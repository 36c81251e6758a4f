/* host_adopt.c: plain buffers made importable (the why and the contract: host_adopt.h). */
#include "mem/host_adopt.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "mem/host.h"
#include "mem/map_colour.h"

struct weft__adopted {
  char *p, *end;       /* the buffer first adopted: [p, end) */
  char *lo, *hi;       /* the whole pages around it; the memfd holds [lo, hi) */
  char *in_lo, *in_hi; /* the interior, remapped onto the memfd (in_lo == in_hi: none) */
  int fd;
  char *view;          /* this process's mapping of the whole memfd */
  char name[48];       /* the memfd's name, unique in the process: proves the interior is ours */
  int refs;
  struct weft__adopted *next;
};

static pthread_mutex_t adopted_lock = PTHREAD_MUTEX_INITIALIZER;
static weft__adopted *adopted;
static atomic_ulong adopt_serial;

/* One line of /proc/self/maps. */
typedef struct {
  uintptr_t start, end, offset;
  char perms[5];
  unsigned long inode;
  const char *path; /* "" for anonymous memory */
} vma;

/* Calls each(v, arg) for every mapping of this process in address order until it returns
 * nonzero; returns that value, 0 after the last, or -1 when maps cannot be read. */
static int each_vma(int (*each)(const vma *v, void *arg), void *arg) {
  FILE *f = fopen("/proc/self/maps", "re");
  if (f == NULL) return -1;
  char line[512];
  int r = 0;
  while (r == 0 && fgets(line, sizeof line, f) != NULL) {
    vma v = {0};
    unsigned long s, e, off;
    int at = 0;
    if (sscanf(line, "%lx-%lx %4s %lx %*x:%*x %lu %n", &s, &e, v.perms, &off, &v.inode, &at) < 5) continue;
    line[strcspn(line, "\n")] = '\0';
    v.start = s, v.end = e, v.offset = off, v.path = line + at;
    r = each(&v, arg);
  }
  fclose(f);
  return r;
}

/* [lo, hi) must be covered, gap-free, by private anonymous writable mappings. */
typedef struct {
  uintptr_t lo, hi, covered;
  int bad;
} private_scan;

static int scan_private(const vma *v, void *arg) {
  private_scan *s = arg;
  if (v->end <= s->lo) return 0;
  if (v->start >= s->hi) return 1;
  int anon = v->inode == 0 && (v->path[0] == '\0' || strcmp(v->path, "[heap]") == 0);
  if (v->start > s->covered || !anon || v->perms[0] != 'r' || v->perms[1] != 'w' || v->perms[3] != 'p') {
    s->bad = 1;
    return 1;
  }
  s->covered = v->end;
  return s->covered >= s->hi;
}

static int all_private(const char *lo, const char *hi) {
  private_scan s = {(uintptr_t)lo, (uintptr_t)hi, (uintptr_t)lo, 0};
  if (each_vma(scan_private, &s) < 0) return 0; /* maps unreadable: say no */
  return !s.bad && s.covered >= s.hi;
}

int weft__host_adoptable(const void *p, size_t bytes) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), b = (uintptr_t)p;
  if (p == NULL || bytes == 0 || b > UINTPTR_MAX - bytes - page) return 0;
  return all_private((const char *)(b / page * page), (const char *)((b + bytes + page - 1) / page * page));
}

/* Whether the interior is still exactly the mapping adoption made. */
typedef struct {
  const weft__adopted *a;
  int ours;
} ours_scan;

static int scan_ours(const vma *v, void *arg) {
  ours_scan *s = arg;
  const weft__adopted *a = s->a;
  if (v->end <= (uintptr_t)a->in_lo) return 0;
  size_t n = strlen(a->name);
  s->ours = v->start == (uintptr_t)a->in_lo && v->end == (uintptr_t)a->in_hi &&
            v->offset == (uintptr_t)(a->in_lo - a->lo) && strncmp(v->path, "/memfd:", 7) == 0 &&
            strncmp(v->path + 7, a->name, n) == 0 && (v->path[7 + n] == ' ' || v->path[7 + n] == '\0');
  return 1;
}

/* Maps [off, off + len) of fd over [at, at + len) in one step (mremap of a fresh mapping
 * onto it), or private anonymous memory when fd < 0; the old pages go only on success.
 * src: bytes to fill the new mapping with first (NULL: none). 0 or an errno. */
static int replace_pages(char *at, size_t len, int fd, size_t off, const char *src) {
  /* Populated, so the program's first touches after the swap take no page faults. */
  void *m = fd >= 0 ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, (off_t)off)
                    : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (m == MAP_FAILED) return errno;
  if (src != NULL) memcpy(m, src, len);
  if (mremap(m, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
    int e = errno;
    munmap(m, len);
    return e;
  }
  return 0;
}

static void adopted_free(weft__adopted *a) {
  if (a->view != NULL) munmap(a->view, (size_t)(a->hi - a->lo));
  if (a->fd >= 0) close(a->fd);
  free(a);
}

/* A new adoption of [p, p + bytes); caller holds adopted_lock. */
static int adopt_new(char *p, size_t bytes, weft__adopted **out) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), b = (uintptr_t)p, e = b + bytes;
  weft__adopted *a = calloc(1, sizeof *a);
  if (a == NULL) return ENOMEM;
  a->fd = -1;
  a->p = p, a->end = p + bytes;
  a->lo = (char *)(b / page * page);
  a->hi = (char *)((e + page - 1) / page * page);
  a->in_lo = (char *)((b + page - 1) / page * page);
  a->in_hi = (char *)(e / page * page);
  if (a->in_hi < a->in_lo) a->in_hi = a->in_lo; /* inside one page: edges only */
  if (!weft__host_adoptable(p, bytes)) {
    free(a);
    return WEFT__ADOPT_NOT_PRIVATE;
  }
  snprintf(a->name, sizeof a->name, "weft-adopted-%lu", atomic_fetch_add(&adopt_serial, 1) + 1);
  size_t len = (size_t)(a->hi - a->lo), got = 0;
  if (weft__memfd_create(a->name, len, &a->fd, &got) != WEFT_SUCCESS) {
    int err = errno != 0 ? errno : ENOMEM;
    free(a);
    return err;
  }
  a->view = weft__map_coloured(len, a->fd, 0); /* why coloured: map_colour.h */
  int err = a->view == MAP_FAILED ? errno : 0;
  if (a->view == MAP_FAILED) a->view = NULL;
  size_t in_len = (size_t)(a->in_hi - a->in_lo), in_off = (size_t)(a->in_lo - a->lo);
  if (err == 0 && in_len > 0) {
    memcpy(a->view + in_off, a->in_lo, in_len);
    err = replace_pages(a->in_lo, in_len, a->fd, in_off, NULL);
  }
  if (err != 0) {
    adopted_free(a);
    return err;
  }
  a->refs = 1;
  *out = a;
  return 0;
}

int weft__host_adopt(void *p, size_t bytes, weft__adopted **out) {
  *out = NULL;
  if (p == NULL || bytes == 0 || (uintptr_t)p > UINTPTR_MAX - bytes) return EINVAL;
  char *b = p, *e = b + bytes;
  pthread_mutex_lock(&adopted_lock);
  int r = 0;
  weft__adopted *a = adopted;
  for (; a != NULL; a = a->next) {
    if (b >= a->p && e <= a->end) break;             /* inside: share it */
    if (b < a->end && e > a->p) r = WEFT__ADOPT_OVERLAP; /* partly: refuse */
  }
  if (a != NULL) {
    a->refs++;
    *out = a;
    r = 0;
  } else if (r == 0) {
    r = adopt_new(b, bytes, out);
    if (r == 0) {
      (*out)->next = adopted;
      adopted = *out;
    }
  }
  pthread_mutex_unlock(&adopted_lock);
  return r;
}

void weft__host_adopt_release(weft__adopted *a) {
  if (a == NULL) return;
  pthread_mutex_lock(&adopted_lock);
  int last = --a->refs == 0;
  if (last) {
    weft__adopted **at = &adopted;
    while (*at != NULL && *at != a) at = &(*at)->next;
    if (*at != NULL) *at = a->next;
  }
  pthread_mutex_unlock(&adopted_lock);
  if (!last) return;
  size_t in_len = (size_t)(a->in_hi - a->in_lo);
  ours_scan s = {a, 0};
  if (in_len > 0 && each_vma(scan_ours, &s) >= 0 && s.ours)
    replace_pages(a->in_lo, in_len, -1, 0, a->in_lo); /* on failure the shared pages stay: same bytes */
  adopted_free(a);
}

int weft__host_adopt_export(void *p, size_t bytes, weft__adopted **a, weft__mem_handle *h) {
  int r = weft__host_adopt(p, bytes, a);
  if (r == 0 && !weft__adopted_export(*a, p, bytes, h)) { /* cannot be: *a holds p */
    weft__host_adopt_release(*a);
    *a = NULL;
    r = EINVAL;
  }
  return r;
}

const char *weft__host_adopt_why(int outcome) {
  switch (outcome) {
    case WEFT__ADOPT_NOT_PRIVATE:
      return "is neither inside one weft_mem_alloc block nor private memory weft can share (a file or "
             "shared mapping, the stack)";
    case WEFT__ADOPT_OVERLAP: return "overlaps a registered plain buffer without lying inside it";
    default: return "could not be shared (memfd_create, mmap or mremap failed)";
  }
}

int weft__adopted_export(const weft__adopted *a, const void *p, size_t bytes, weft__mem_handle *h) {
  const char *b = p;
  if (b < a->p || b > a->end || (size_t)(a->end - b) < bytes) return 0;
  memset(h, 0, sizeof *h);
  h->pid = (int32_t)getpid();
  h->fd = a->fd;
  h->offset = (uint64_t)(b - a->lo);
  h->bytes = bytes;
  return 1;
}

char *weft__adopted_view(const weft__adopted *a, const void *p) {
  return a->view + ((const char *)p - a->lo);
}

/* Copies the part of [p, p + n) inside [from, to) (an edge) in the direction asked. */
static void sync_edge(const weft__adopted *a, const char *p, size_t n, const char *from, const char *to, int to_view) {
  const char *s = p > from ? p : from, *e = p + n < to ? p + n : to;
  if (s >= e) return;
  char *v = weft__adopted_view(a, s);
  if (to_view) memcpy(v, s, (size_t)(e - s));
  else memcpy((char *)s, v, (size_t)(e - s));
}

void weft__adopted_sync(const weft__adopted *a, const void *p, size_t n, int to_view) {
  sync_edge(a, p, n, a->p, a->in_lo, to_view);
  sync_edge(a, p, n, a->in_hi, a->end, to_view);
}

weft__adopted *weft__adopted_find(const void *p, size_t bytes) {
  const char *b = p;
  pthread_mutex_lock(&adopted_lock);
  weft__adopted *a = adopted;
  while (a != NULL && !(b >= a->p && b <= a->end && (size_t)(a->end - b) >= bytes)) a = a->next;
  pthread_mutex_unlock(&adopted_lock);
  return a;
}
