/* The floor of 16-row calls on 100 full depth-8 trees, hand-written.

   100 trees of 255 nodes (random thresholds, 32 float32 features), 16 rows a call, 1 thread:
   the walks SilvanForge generates against hand-written C of each approach, all returning the
   same sums (checked at the end).  No NaN handling, no float64: a lower bound for each.

     scalar     one row after another, tree by tree (a dependent load chain a level)
     gathers    16 rows in one AVX-512 vector, 4 trees interleaved: each level gathers the
                threshold, the feature and the rows' values (3 gathers)
     perms      levels 0-4 take threshold and feature from registers (vpermps), the rest gather
     perms2     levels 0-6 from registers (vpermi2ps, two for level 6), level 7 gathers; every
                level still gathers the rows' values
     scalar16   16 rows interleaved, scalar (the form SilvanForge generates)
     scalar16p  the same with threshold and feature side by side

   gcc -O3 -march=native benchmarks/walk16_floor.c -o /tmp/walk16 -lm && /tmp/walk16
   Measured (docs/benchmarks.md, "Small calls"): Zen 4 gathers cost about 16 cycles for 16 lanes,
   so even perms2 takes 7.0 us, above a 6 us aim; SilvanForge's scalar walks take 10.4. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <math.h>
#define T 100
#define D 8
#define NODES 255
#define F 32
#define R 16
float thr[T][NODES]; int32_t feat[T][NODES]; float leaf[T][256];
float X[R*F];
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
/* scalar reference: go right iff x >= t (NaN left) */
void scalar(float *out){
  for(int r=0;r<R;r++){float s=0;for(int t=0;t<T;t++){int i=0;for(int d=0;d<D;d++){float x=X[r*F+feat[t][i]];i=2*i+1+(x>=thr[t][i]);}s+=leaf[t][i-NODES];}out[r]=s;}
}
/* gather-only: 16 lanes = rows, TI trees interleaved */
#define TI 4 /* trees interleaved */
void gathers(float *out){
  __m512i rowoff=_mm512_mullo_epi32(_mm512_setr_epi32(0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15),_mm512_set1_epi32(F));
  __m512 s=_mm512_setzero_ps();
  for(int t=0;t<T;t+=TI){
    __m512i idx[TI];
    for(int k=0;k<TI;k++) idx[k]=_mm512_setzero_si512();
    for(int d=0;d<D;d++){
      for(int k=0;k<TI;k++){
        __m512 th=_mm512_i32gather_ps(idx[k],thr[t+k],4);
        __m512i f=_mm512_i32gather_epi32(idx[k],feat[t+k],4);
        __m512 x=_mm512_i32gather_ps(_mm512_add_epi32(rowoff,f),X,4);
        __mmask16 m=_mm512_cmp_ps_mask(x,th,_CMP_GE_OQ);
        idx[k]=_mm512_mask_add_epi32(_mm512_add_epi32(_mm512_add_epi32(idx[k],idx[k]),_mm512_set1_epi32(1)),m,_mm512_add_epi32(_mm512_add_epi32(idx[k],idx[k]),_mm512_set1_epi32(1)),_mm512_set1_epi32(1));
      }
    }
    for(int k=0;k<TI;k++) s=_mm512_add_ps(s,_mm512_i32gather_ps(_mm512_sub_epi32(idx[k],_mm512_set1_epi32(NODES)),leaf[t+k],4));
  }
  _mm512_storeu_ps(out,s);
}
/* permutes for levels 0-4 (level k nodes: 2^k-1 .. 2^(k+1)-2), gathers below */
float lthr[T][16]; int32_t lfeat[T][16]; /* levels 0..3: 15 nodes in BFS order */
float l4thr[T][16]; int32_t l4feat[T][16];
void perms(float *out){
  __m512i rowoff=_mm512_mullo_epi32(_mm512_setr_epi32(0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15),_mm512_set1_epi32(F));
  __m512 s=_mm512_setzero_ps(); __m512i one=_mm512_set1_epi32(1);
  for(int t=0;t<T;t+=TI){
    __m512i idx[TI];
    for(int k=0;k<TI;k++) idx[k]=_mm512_setzero_si512();
    for(int d=0;d<D;d++){
      for(int k=0;k<TI;k++){
        __m512 th; __m512i f;
        if(d<4){ th=_mm512_permutexvar_ps(idx[k],_mm512_loadu_ps(lthr[t+k])); f=_mm512_permutexvar_epi32(idx[k],_mm512_loadu_si512(lfeat[t+k])); }
        else if(d==4){ __m512i li=_mm512_sub_epi32(idx[k],_mm512_set1_epi32(15)); th=_mm512_permutexvar_ps(li,_mm512_loadu_ps(l4thr[t+k])); f=_mm512_permutexvar_epi32(li,_mm512_loadu_si512(l4feat[t+k])); }
        else { th=_mm512_i32gather_ps(idx[k],thr[t+k],4); f=_mm512_i32gather_epi32(idx[k],feat[t+k],4);} 
        __m512 x=_mm512_i32gather_ps(_mm512_add_epi32(rowoff,f),X,4);
        __mmask16 m=_mm512_cmp_ps_mask(x,th,_CMP_GE_OQ);
        __m512i c=_mm512_add_epi32(_mm512_add_epi32(idx[k],idx[k]),one);
        idx[k]=_mm512_mask_add_epi32(c,m,c,one);
      }
    }
    for(int k=0;k<TI;k++) s=_mm512_add_ps(s,_mm512_i32gather_ps(_mm512_sub_epi32(idx[k],_mm512_set1_epi32(NODES)),leaf[t+k],4));
  }
  _mm512_storeu_ps(out,s);
}
float l5thr[T][32]; int32_t l5feat[T][32]; float l6thr[T][64]; int32_t l6feat[T][64];
void perms2(float *out){
  __m512i rowoff=_mm512_mullo_epi32(_mm512_setr_epi32(0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15),_mm512_set1_epi32(F));
  __m512 s=_mm512_setzero_ps(); __m512i one=_mm512_set1_epi32(1);
  for(int t=0;t<T;t+=TI){
    __m512i idx[TI];
    for(int k=0;k<TI;k++) idx[k]=_mm512_setzero_si512();
    for(int d=0;d<D;d++){
      for(int k=0;k<TI;k++){
        __m512 th; __m512i f;
        if(d<4){ th=_mm512_permutexvar_ps(idx[k],_mm512_loadu_ps(lthr[t+k])); f=_mm512_permutexvar_epi32(idx[k],_mm512_loadu_si512(lfeat[t+k])); }
        else if(d==4){ __m512i li=_mm512_sub_epi32(idx[k],_mm512_set1_epi32(15)); th=_mm512_permutexvar_ps(li,_mm512_loadu_ps(l4thr[t+k])); f=_mm512_permutexvar_epi32(li,_mm512_loadu_si512(l4feat[t+k])); }
        else if(d==5){ __m512i li=_mm512_sub_epi32(idx[k],_mm512_set1_epi32(31)); th=_mm512_permutex2var_ps(_mm512_loadu_ps(l5thr[t+k]),li,_mm512_loadu_ps(l5thr[t+k]+16)); f=_mm512_permutex2var_epi32(_mm512_loadu_si512(l5feat[t+k]),li,_mm512_loadu_si512(l5feat[t+k]+16)); }
        else if(d==6){ __m512i li=_mm512_sub_epi32(idx[k],_mm512_set1_epi32(63)); __mmask16 hi=_mm512_test_epi32_mask(li,_mm512_set1_epi32(32));
           __m512 a=_mm512_permutex2var_ps(_mm512_loadu_ps(l6thr[t+k]),li,_mm512_loadu_ps(l6thr[t+k]+16)); __m512 b2=_mm512_permutex2var_ps(_mm512_loadu_ps(l6thr[t+k]+32),li,_mm512_loadu_ps(l6thr[t+k]+48)); th=_mm512_mask_blend_ps(hi,a,b2);
           __m512i fa=_mm512_permutex2var_epi32(_mm512_loadu_si512(l6feat[t+k]),li,_mm512_loadu_si512(l6feat[t+k]+16)); __m512i fb=_mm512_permutex2var_epi32(_mm512_loadu_si512(l6feat[t+k]+32),li,_mm512_loadu_si512(l6feat[t+k]+48)); f=_mm512_mask_blend_epi32(hi,fa,fb);}
        else { th=_mm512_i32gather_ps(idx[k],thr[t+k],4); f=_mm512_i32gather_epi32(idx[k],feat[t+k],4);} 
        __m512 x=_mm512_i32gather_ps(_mm512_add_epi32(rowoff,f),X,4);
        __mmask16 m=_mm512_cmp_ps_mask(x,th,_CMP_GE_OQ);
        __m512i c=_mm512_add_epi32(_mm512_add_epi32(idx[k],idx[k]),one);
        idx[k]=_mm512_mask_add_epi32(c,m,c,one);
      }
    }
    for(int k=0;k<TI;k++) s=_mm512_add_ps(s,_mm512_i32gather_ps(_mm512_sub_epi32(idx[k],_mm512_set1_epi32(NODES)),leaf[t+k],4));
  }
  _mm512_storeu_ps(out,s);
}
void scalar16(float *out){
  float s[R]={0};
  for(int t=0;t<T;t++){ int i[R]; for(int r=0;r<R;r++) i[r]=0;
    const float *th=thr[t]; const int32_t *fe=feat[t];
    for(int d=0;d<D;d++){
      for(int r=0;r<R;r++){ int n=i[r]; i[r]=2*n+1+(X[r*F+fe[n]]>=th[n]); }
    }
    for(int r=0;r<R;r++) s[r]+=leaf[t][i[r]-NODES];
  }
  for(int r=0;r<R;r++) out[r]=s[r];
}
typedef struct { float t; int32_t f; } node_t;
node_t nodes[T][NODES];
void scalar16p(float *out){
  float s[R]={0};
  for(int t=0;t<T;t++){ int i[R]; for(int r=0;r<R;r++) i[r]=0;
    const node_t *nd=nodes[t];
    for(int d=0;d<D;d++){
      for(int r=0;r<R;r++){ int n=i[r]; i[r]=2*n+1+(X[r*F+nd[n].f]>=nd[n].t); }
    }
    for(int r=0;r<R;r++) s[r]+=leaf[t][i[r]-NODES];
  }
  for(int r=0;r<R;r++) out[r]=s[r];
}
int main(){
  srand(1);
  for(int t=0;t<T;t++){for(int i=0;i<NODES;i++){thr[t][i]=rand()/(float)RAND_MAX;feat[t][i]=rand()%F;} for(int i=0;i<256;i++)leaf[t][i]=rand()/(float)RAND_MAX;
    for(int i=0;i<15;i++){lthr[t][i]=thr[t][i];lfeat[t][i]=feat[t][i];} for(int i=0;i<16;i++){l4thr[t][i]=thr[t][15+i];l4feat[t][i]=feat[t][15+i];}
    for(int i=0;i<32;i++){l5thr[t][i]=thr[t][31+i];l5feat[t][i]=feat[t][31+i];} for(int i=0;i<64;i++){l6thr[t][i]=thr[t][63+i];l6feat[t][i]=feat[t][63+i];} for(int i=0;i<NODES;i++){nodes[t][i].t=thr[t][i];nodes[t][i].f=feat[t][i];}}
  float a[R],b[R],c[R],e[R];
  void (*fns[6])(float*)={scalar,gathers,perms,perms2,scalar16,scalar16p}; const char*names[6]={"scalar","gathers","perms","perms2","scalar16","scalar16p"};
  for(int f=0;f<6;f++){double best=1e9;for(int rep=0;rep<2000;rep++){for(int i=0;i<R*F;i++)X[i]=rand()/(float)RAND_MAX; double t0=now(); fns[f](f==0?a:f==1?b:f==2?c:e); double t1=now(); if(t1-t0<best)best=t1-t0;} printf("%s %.2f us\n",names[f],best*1e6);}
  for(int i=0;i<R*F;i++)X[i]=rand()/(float)RAND_MAX; scalar(a);gathers(b);perms(c);perms2(e);
  for(int r=0;r<R;r++) if(fabsf(a[r]-b[r])>1e-3||fabsf(a[r]-c[r])>1e-3||fabsf(a[r]-e[r])>1e-3) {printf("mismatch %d %f %f %f\n",r,a[r],b[r],c[r]);}
  return 0;
}
