package controllers

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/backendslice/backendslice/api/v1alpha1"
)

// unhandledFirst enqueues ExternalBackends as controller-runtime's own
// handler does, except for the cache's initial list: there, a backend whose
// spec this controller has not handled yet (status.observedGeneration
// behind metadata.generation: edited while no controller ran, during a
// restart or a leader change) keeps the normal priority, and only the
// others go behind every change. Otherwise an edit made while a new
// controller starts would wait for it to look at every backend (58 s at
// 20,000 backends in the ceiling benchmark).
func unhandledFirst() handler.EventHandler {
	base := &handler.EnqueueRequestForObject{}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
			pq, ok := q.(priorityqueue.PriorityQueue[ctrl.Request])
			if !ok || e.Object == nil {
				base.Create(ctx, e, q)
				return
			}
			// Explicit either way: handler.Funcs gives the initial list a
			// low default priority of its own.
			priority := 0
			if e.IsInInitialList && handled(e.Object) {
				priority = handler.LowPriority
			}
			pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(priority)}, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
		},
		UpdateFunc:  base.Update,
		DeleteFunc:  base.Delete,
		GenericFunc: base.Generic,
	}
}

// handled tells whether the backend's status says its spec was handled.
func handled(o client.Object) bool {
	xb, ok := o.(*v1alpha1.ExternalBackend)
	return ok && xb.Status.ObservedGeneration == xb.Generation
}

// backendLogger gives each reconcile's log the keys controller-runtime's
// builder gives a controller built with For(&ExternalBackend{}), which
// takes no handler of its own: the backend is watched with unhandledFirst.
func backendLogger(base logr.Logger) func(*ctrl.Request) logr.Logger {
	log := base.WithValues("controller", "externalbackend",
		"controllerGroup", v1alpha1.GroupVersion.Group, "controllerKind", "ExternalBackend")
	return func(req *ctrl.Request) logr.Logger {
		if req == nil {
			return log
		}
		return log.WithValues("ExternalBackend", klog.KRef(req.Namespace, req.Name), "namespace", req.Namespace, "name", req.Name)
	}
}
