/*
 * mpi_coll_perf: the OpenMPI peer of `goccl perf`. It times one MPI
 * collective per size (float32; sum where it reduces) and prints the
 * columns of nccl-tests, out of place except broadcast (MPI_Bcast has one
 * buffer):
 *   size(B) count type redop root time(us) algbw(GB/s) busbw(GB/s) #wrong
 * time is the slowest rank's mean over -n blocking operations after -w
 * warm-up ones. size and count follow nccl-tests: size is the whole buffer
 * (the gathered output of all_gather, the input of reduce_scatter, each
 * rank's buffer of alltoall) and count the elements per call; those three
 * split the buffer into per-rank blocks of count elements, rounded down to
 * 16 bytes (sizes with an empty block are left out), so rows line up with
 * `goccl perf`. algbw = size / time, GB = 1e9, and busbw = algbw *
 * the factor of nccl-tests doc/PERFORMANCE.md for n ranks: all_reduce
 * 2(n-1)/n, all_gather, reduce_scatter and alltoall (n-1)/n, broadcast 1.
 * After timing, one operation on known data is checked on every rank and
 * #wrong is the number of wrong elements summed over ranks.
 *
 * With -p 1 it prints instead what examples/latency prints for goccl:
 *   bytes iters p50 p90 p99 mean
 * rank 0's own time of each operation, in µs (MPI_Wtime around each call),
 * the percentiles by rank (sorted times, index iters*q/100).
 *
 * Build: mpicc -O2 -o mpi_coll_perf scripts/peers/mpi_coll_perf.c
 * Run:   mpirun -np 2 ./mpi_coll_perf [-c all_reduce|all_gather|reduce_scatter|
 *          broadcast|alltoall] [-b 8] [-e 64M] [-f 2] [-n 20] [-w 5] [-p 0|1]
 * Sizes take K, M and G suffixes (powers of 1024).
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum coll { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, ALLTOALL, NCOLL };

static const struct {
  const char *name, *redop;
  int chunked; /* each rank owns count/n elements of the buffer */
} colls[NCOLL] = {
  [ALL_REDUCE] = {"all_reduce", "sum", 0},
  [ALL_GATHER] = {"all_gather", "none", 1},
  [REDUCE_SCATTER] = {"reduce_scatter", "sum", 1},
  [BROADCAST] = {"broadcast", "none", 0},
  [ALLTOALL] = {"alltoall", "none", 1},
};

struct opts {
  enum coll coll;
  long minb, maxb, factor, iters, warmup, pct;
};

/* The check data: distinct per rank and per element, small integers so that
 * sums over up to ~500 ranks stay exact in float32. */
static float value(int rank, long k) { return (float)((rank + 1) * 64 + k % 61); }

static double busfactor(enum coll c, int n) {
  switch (c) {
  case ALL_REDUCE: return 2.0 * (n - 1) / n;
  case BROADCAST: return 1.0;
  default: return (double)(n - 1) / n;
  }
}

/* parse_size reads 8, 64K, 128M or 1G; it returns -1 when s is not one. */
static long parse_size(const char *s) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || v < 0) return -1;
  switch (*end) {
  case 'K': case 'k': v <<= 10; end++; break;
  case 'M': case 'm': v <<= 20; end++; break;
  case 'G': case 'g': v <<= 30; end++; break;
  }
  return *end ? -1 : v;
}

/* parse_opts fills o from argv; on bad input it writes why to err and
 * returns -1 (every rank parses the same arguments, so all of them agree). */
static int parse_opts(int argc, char **argv, struct opts *o, char *err, size_t errlen) {
  *o = (struct opts){ALL_REDUCE, 8, 64L << 20, 2, 20, 5, 0};
  for (int i = 1; i < argc; i += 2) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) { snprintf(err, errlen, "flag %s needs a value", f); return -1; }
    long x = parse_size(v);
    if (!strcmp(f, "-c")) {
      int c;
      for (c = 0; c < NCOLL && strcmp(v, colls[c].name); c++) {}
      if (c == NCOLL) { snprintf(err, errlen, "-c %s: unknown collective", v); return -1; }
      o->coll = (enum coll)c;
      continue;
    }
    if (x < 0) { snprintf(err, errlen, "%s %s: not a size or count", f, v); return -1; }
    if (!strcmp(f, "-b")) o->minb = x;
    else if (!strcmp(f, "-e")) o->maxb = x;
    else if (!strcmp(f, "-f")) o->factor = x;
    else if (!strcmp(f, "-n")) o->iters = x;
    else if (!strcmp(f, "-w")) o->warmup = x;
    else if (!strcmp(f, "-p")) o->pct = x;
    else { snprintf(err, errlen, "unknown flag %s", f); return -1; }
  }
  if (o->minb < 1 || o->maxb < o->minb) { snprintf(err, errlen, "-b %ld -e %ld: need 1 <= -b <= -e", o->minb, o->maxb); return -1; }
  if (o->factor < 2) { snprintf(err, errlen, "-f %ld: need a factor >= 2", o->factor); return -1; }
  if (o->iters < 1) { snprintf(err, errlen, "-n %ld: need at least 1 iteration", o->iters); return -1; }
  if (o->maxb / (long)sizeof(float) > INT_MAX) { snprintf(err, errlen, "-e %ld: MPI counts are int: at most 8G", o->maxb); return -1; }
  return 0;
}

/* run_op runs one collective of count elements (chunk per rank). */
static void run_op(enum coll c, float *s, float *r, long count, long chunk) {
  switch (c) {
  case ALL_REDUCE: MPI_Allreduce(s, r, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
  case ALL_GATHER: MPI_Allgather(s, (int)chunk, MPI_FLOAT, r, (int)chunk, MPI_FLOAT, MPI_COMM_WORLD); break;
  case REDUCE_SCATTER: MPI_Reduce_scatter_block(s, r, (int)chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
  case BROADCAST: MPI_Bcast(s, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
  case ALLTOALL: MPI_Alltoall(s, (int)chunk, MPI_FLOAT, r, (int)chunk, MPI_FLOAT, MPI_COMM_WORLD); break;
  default: break;
  }
}

/* check runs one operation on value() data and returns this rank's number
 * of wrong output elements. */
static long check(enum coll c, float *s, float *r, long count, long chunk, int rank, int n) {
  long sum = (long)n * (n + 1) / 2 * 64, wrong = 0;
  for (long k = 0; k < count; k++) { s[k] = value(rank, k); r[k] = -1; }
  if (c == BROADCAST && rank != 0)
    for (long k = 0; k < count; k++) s[k] = -1;
  run_op(c, s, r, count, chunk);
  switch (c) {
  case ALL_REDUCE:
    for (long k = 0; k < count; k++) wrong += r[k] != (float)(sum + n * (k % 61));
    break;
  case REDUCE_SCATTER:
    for (long j = 0; j < chunk; j++) wrong += r[j] != (float)(sum + n * ((rank * chunk + j) % 61));
    break;
  case ALL_GATHER:
    for (long k = 0; k < count; k++) wrong += r[k] != value((int)(k / chunk), k % chunk);
    break;
  case ALLTOALL: /* block src of the output is block rank of src's input */
    for (long k = 0; k < count; k++) wrong += r[k] != value((int)(k / chunk), rank * chunk + k % chunk);
    break;
  case BROADCAST:
    for (long k = 0; k < count; k++) wrong += s[k] != value(0, k);
    break;
  default: break;
  }
  return wrong;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* run_size_pct times each of -n operations of one size and prints rank 0's
 * percentiles (-p 1). */
static void run_size_pct(const struct opts *o, long bytes, float *s, float *r, int rank, double *t) {
  long count = bytes / (long)sizeof(float);
  for (long k = 0; k < count; k++) { s[k] = value(rank, k); r[k] = 0; }
  for (long i = 0; i < o->warmup; i++) run_op(o->coll, s, r, count, count);
  MPI_Barrier(MPI_COMM_WORLD);
  double total = 0;
  for (long i = 0; i < o->iters; i++) {
    double t0 = MPI_Wtime();
    run_op(o->coll, s, r, count, count);
    t[i] = (MPI_Wtime() - t0) * 1e6;
    total += t[i];
  }
  if (rank != 0) return;
  qsort(t, (size_t)o->iters, sizeof *t, cmp_double);
  long it = o->iters;
  printf("%12ld %8ld %10.2f %10.2f %10.2f %10.2f\n", bytes, it, t[it / 2], t[it * 9 / 10], t[it * 99 / 100], total / it);
  fflush(stdout);
}

/* run_size times and checks one size and prints its row on rank 0. */
static void run_size(const struct opts *o, long bytes, float *s, float *r, int rank, int n) {
  long count = bytes / (long)sizeof(float), chunk = count;
  if (colls[o->coll].chunked) { chunk = (count / n) & ~3L; count = chunk * n; }
  if (chunk == 0) return; /* too small to give every rank a 16-byte block */
  for (long k = 0; k < count; k++) { s[k] = value(rank, k); r[k] = 0; }
  for (long i = 0; i < o->warmup; i++) run_op(o->coll, s, r, count, chunk);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (long i = 0; i < o->iters; i++) run_op(o->coll, s, r, count, chunk);
  double t = (MPI_Wtime() - t0) / o->iters, tmax;
  MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  long wrong = check(o->coll, s, r, count, chunk, rank, n), wall;
  MPI_Allreduce(&wrong, &wall, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank != 0) return;
  long size = count * (long)sizeof(float);
  double algbw = size / tmax / 1e9;
  printf(" %12ld %12ld %6s %6s %6d %10.2f %8.2f %8.2f %6ld\n", size, chunk, "float", colls[o->coll].redop,
         o->coll == BROADCAST ? 0 : -1, tmax * 1e6, algbw, algbw * busfactor(o->coll, n), wall);
  fflush(stdout);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  struct opts o;
  char err[200];
  if (parse_opts(argc, argv, &o, err, sizeof err) != 0) {
    if (rank == 0) fprintf(stderr, "mpi_coll_perf: %s\n", err);
    MPI_Finalize();
    return 2;
  }
  float *s = malloc((size_t)o.maxb + sizeof(float)), *r = malloc((size_t)o.maxb + sizeof(float));
  int ok = s && r, all;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    if (!ok) fprintf(stderr, "mpi_coll_perf: rank %d: cannot allocate 2 x %ld bytes (-e)\n", rank, o.maxb);
    MPI_Finalize();
    return 1;
  }
  if (o.pct) {
    if (o.coll != ALL_REDUCE && o.coll != BROADCAST) {
      if (rank == 0) fprintf(stderr, "mpi_coll_perf: -p 1 times all_reduce or broadcast only\n");
      MPI_Finalize();
      return 2;
    }
    double *t = malloc((size_t)o.iters * sizeof *t);
    if (!t) { fprintf(stderr, "mpi_coll_perf: rank %d: cannot allocate %ld times (-n)\n", rank, o.iters); MPI_Abort(MPI_COMM_WORLD, 1); }
    if (rank == 0) {
      printf("# %s, %d ranks, float32; time per operation in µs on rank 0 (OpenMPI)\n", colls[o.coll].name, n);
      printf("%12s %8s %10s %10s %10s %10s\n", "bytes", "iters", "p50", "p90", "p99", "mean");
    }
    for (long b = o.minb; b <= o.maxb; b *= o.factor) run_size_pct(&o, b, s, r, rank, t);
    free(t);
    free(s);
    free(r);
    MPI_Finalize();
    return 0;
  }
  if (rank == 0) {
    printf("# %s, %d ranks, OpenMPI peer (%s)\n", colls[o.coll].name, n,
           o.coll == BROADCAST ? "in place" : "out of place");
    printf("#%12s %12s %6s %6s %6s %10s %8s %8s %6s\n", "size", "count", "type", "redop", "root", "time", "algbw",
           "busbw", "#wrong");
  }
  for (long b = o.minb; b <= o.maxb; b *= o.factor) run_size(&o, b, s, r, rank, n);
  free(s);
  free(r);
  MPI_Finalize();
  return 0;
}
